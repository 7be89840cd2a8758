"""Checkpoint and exact resume (docs/running/checkpoints.md).

Every `checkpoint-every` rounds (and after the last) the ServerApp writes `checkpoints/round-<r>/` into the results
folder: the strategy's whole algorithm state (`server.json` + `server.npz`), the results rows so far, the run
config, and a snapshot of the client-state files (`client-state/`); `checkpoints/latest.json` then names it.
Each checkpoint is built in a temporary folder and renamed into place, and latest.json is replaced atomically, so a
run killed at any moment leaves the previous checkpoint whole; a file that cannot be written is named in the error
(a full disk: OutDirFull, as for every results file). The client-state snapshot is taken between rounds (no client
writes then) as copies, never hard links, and a resume copies them back: damage done in place to a live state file
(a truncation, a write into it) cannot reach the checkpoint, nor damage to the checkpoint the live files.

`load` reads the folder latest.json names. When latest.json is damaged (or missing beside round folders), it
loads the newest `round-<r>` folder whose manifest verifies, with a warning naming both: a sealed folder is a
whole checkpoint, and a resume from it is as exact as from any other.

The state saved is what the strategy declares (`RuleStrategy.state_dict`: the rule's declared state with the
global model, the acceptance ledger, the run guard's initial loss; fedsuite.rules.declared), so an algorithm added
later is covered by its declaration, and a resumed strategy checks the loaded state against the same declaration. A
value of a type this module cannot write exactly is an error, never silently dropped. The sampler needs no position:
cohorts are a function of (seed, round).

Client state a SuperNode keeps in its own client-state-dir is not in the snapshot: the nodes keep it under the
state key (`server.json`'s "state-key", the first run's id), which a resumed run sends again, and undo their one
unconfirmed write (fedsuite.state.store); `check_node_held_state` refuses a resume they could not follow exactly.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedsuite.results import checkpoint_files
from fedsuite.results.checkpoint_files import CheckpointError
from fedsuite.results.folder import OutDirFull, full_message, is_disk_full
from fedsuite.state.store import state_files

log = logging.getLogger("flwr.fedsuite")
FOLDER = "checkpoints"
LATEST = "latest.json"
CLIENT_STATE = "client-state"


def resumable_keys() -> frozenset[str]:
    """Run-config keys that may differ between a run and its resumption (their `resumable` tag,
    fedsuite.config.run_config): they change where things go, how long the run is or how it is checked, never the
    numbers of the rounds already done or to come."""
    from fedsuite.config.run_config import active_schema

    return frozenset(name for name, key in active_schema().items() if key.resumable)


@dataclass
class Checkpoint:
    folder: Path  # checkpoints/round-<r>
    server_round: int
    state: dict[str, Any]
    rows: list[dict[str, Any]]
    run_config: dict[str, Any]
    state_key: int | None = None  # the run id naming node-held client-state folders (None: an older checkpoint)

    @property
    def client_state(self) -> Path:
        return self.folder / CLIENT_STATE


def _encode(value: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(value)
        return {"__array__": key, "scalar": isinstance(value, np.generic)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k, arrays, where), _encode(v, arrays, f"{where}[{k!r}]")]
                             for k, v in value.items()]}  # fmt: skip
    if isinstance(value, deque):
        return {"__deque__": [_encode(v, arrays, where) for v in value], "maxlen": value.maxlen}
    if isinstance(value, set | frozenset):
        items = [_encode(v, arrays, where) for v in sorted(value)]
        return {"__set__": items, "frozen": isinstance(value, frozenset)}
    if isinstance(value, list | tuple):
        return {"__list__" if isinstance(value, list) else "__tuple__": [_encode(v, arrays, where) for v in value]}
    raise CheckpointError(
        f"declared state {where} is a {type(value).__name__}, which a checkpoint cannot hold exactly; keep "
        "algorithm state in numpy arrays, numbers, strings, lists, tuples, sets, dicts or deques "
        "(fedsuite.rules.declared)"
    )


def _decode(tree: Any, arrays) -> Any:
    if not isinstance(tree, dict):
        return tree
    if "__array__" in tree:
        a = np.array(arrays[tree["__array__"]])
        return a[()] if tree["scalar"] else a
    if "__dict__" in tree:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in tree["__dict__"]}
    if "__deque__" in tree:
        return deque((_decode(v, arrays) for v in tree["__deque__"]), maxlen=tree["maxlen"])
    if "__set__" in tree:
        items = (_decode(v, arrays) for v in tree["__set__"])
        return frozenset(items) if tree["frozen"] else set(items)
    if "__tuple__" in tree:
        return tuple(_decode(v, arrays) for v in tree["__tuple__"])
    return [_decode(v, arrays) for v in tree["__list__"]]


def encode_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    tree = {name: _encode(value, arrays, name) for name, value in state.items()}
    return tree, arrays


def write(results: Path, server_round: int, state: dict[str, Any], rows: list[dict], run_config: dict,
          client_state_root: Path | None, state_key: int | None = None) -> Path:  # fmt: skip
    """Write checkpoint `server_round` (module docstring); returns its folder. Older checkpoints are removed once
    the new one is in place and named by latest.json. A failure at any byte (a full disk) removes what this call
    wrote, the `checkpoints/` folder too when this call made it, and raises: the previous checkpoint stays whole and
    latest. A file that cannot be written is a CheckpointError naming it and the OSError."""
    base = results / FOLDER
    made_base = not base.exists()
    tmp = base / f".round-{server_round:06d}-{uuid.uuid4().hex[:8]}.tmp"
    target = base / f"round-{server_round:06d}"
    latest = base / f".{LATEST}.{uuid.uuid4().hex[:8]}"
    placed = False
    where = base  # the file or folder being written, named when writing it fails
    try:
        base.mkdir(parents=True, exist_ok=True)
        where = tmp
        tmp.mkdir()
        tree, arrays = encode_state(state)
        where = tmp / "server.npz"
        np.savez(where, **arrays)
        where = tmp / "server.json"
        where.write_text(json.dumps({"round": server_round, "state": tree, "state-key": state_key}))
        where = tmp / "rows.jsonl"
        where.write_text("".join(json.dumps(r) + "\n" for r in rows))
        where = tmp / "run_config.json"
        where.write_text(json.dumps(run_config, indent=1))
        snapshot = where = tmp / CLIENT_STATE
        snapshot.mkdir()
        if client_state_root is not None and client_state_root.is_dir():
            for path in state_files(client_state_root):
                where = snapshot / path.name
                _copy(path, where)
        where = tmp / checkpoint_files.MANIFEST
        checkpoint_files.seal(tmp)  # sizes and digests: a file damaged later is named before any resume
        where = target
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        placed = True
        where = base / LATEST
        latest.write_text(json.dumps({"round": server_round, "folder": target.name}))
        os.replace(latest, base / LATEST)
    except BaseException as err:
        _remove_written(tmp, latest, target if placed else None, base if made_base else None)
        if isinstance(err, OSError):
            raise write_problem(results, where, err, server_round) from err
        raise
    _remove_older(base, target)
    return target


def _remove_written(tmp: Path, latest: Path, placed: Path | None, made_base: Path | None) -> None:
    """What a failed `write` wrote: its temporary folder and latest.json, the checkpoint folder it placed, and the
    checkpoints/ folder it made (only what this call wrote is in it)."""
    shutil.rmtree(tmp, ignore_errors=True)
    latest.unlink(missing_ok=True)
    if placed is not None:
        shutil.rmtree(placed, ignore_errors=True)
    if made_base is not None:
        shutil.rmtree(made_base, ignore_errors=True)


def _remove_older(base: Path, target: Path) -> None:
    """Every checkpoint in `base` but `target`, once `target` is in place and named by latest.json."""
    for old in base.glob("round-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)


def write_problem(results: Path, where: Path, err: OSError, server_round: int) -> OSError | CheckpointError:
    """The one-line error of a checkpoint file that could not be written: a full disk is OutDirFull in the words
    of every full out-dir (fedsuite.results.folder), anything else a CheckpointError with the OSError; both name the
    file."""
    kept = "what this checkpoint wrote is removed and the previous checkpoint, if any, stays the latest"
    if is_disk_full(err):
        return OutDirFull(f"{full_message(results, f'checkpoint file {where}', err)}; {kept}")
    why = f"{type(err).__name__}: {err.strerror or err}"
    return CheckpointError(f"checkpoint of round {server_round}: {where} could not be written ({why}); {kept}; "
                           "check that folder's permissions and file system")  # fmt: skip


def _copy(src: Path, dst: Path) -> None:
    """A copy of its own, never a link: damage to one file in place (a truncation, a write into it) cannot reach
    the other."""
    shutil.copyfile(src, dst)


def has_checkpoint(results: Path) -> bool:
    return (results / FOLDER / LATEST).is_file()


ROUND_FOLDER = re.compile(r"round-\d{6,}")


def load(results: Path) -> Checkpoint:
    """The latest checkpoint of `results`, every file verified against its manifest first
    (fedsuite.results.checkpoint_files);
    any unreadable file is a CheckpointError naming it. A damaged or missing latest.json beside round folders is
    not fatal: the newest round folder whose manifest verifies is loaded, with a warning naming both."""
    base = results / FOLDER
    latest = base / LATEST
    try:
        named = json.loads(latest.read_text())["folder"]
        if not (isinstance(named, str) and ROUND_FOLDER.fullmatch(named)):
            raise ValueError(f"'folder' is {named!r}, not a round-<r> folder name")
        folder = base / named
    except FileNotFoundError:
        if not any(base.glob("round-*")):
            raise CheckpointError(f"no checkpoint in {results} ({latest} does not exist); a run writes one with "
                                  "checkpoint-every=<rounds>") from None  # fmt: skip
        folder = _newest_whole(base, f"{latest} does not exist")
    except (OSError, ValueError, KeyError, TypeError) as err:
        folder = _newest_whole(base, f"{latest} is damaged ({type(err).__name__}: {err})")
    checkpoint_files.verify(folder)
    return _read(folder)


def _newest_whole(base: Path, why: str) -> Path:
    """The newest round folder of `base` whose manifest verifies, with a warning saying why it is used; else a
    CheckpointError naming the damaged latest.json and what is wrong with the round folders."""
    folders = sorted((p for p in base.glob("round-*") if p.is_dir() and ROUND_FOLDER.fullmatch(p.name)),
                     key=lambda p: int(p.name[len("round-"):]), reverse=True)  # fmt: skip
    problems = []
    for folder in folders:
        try:
            checkpoint_files.verify(folder)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        log.warning("fedsuite │ %s; using the newest checkpoint whose every file verifies against its manifest: "
                    "%s (the next checkpoint written replaces latest.json)", why, folder)  # fmt: skip
        return folder
    if problems:  # the newest folder's problem, which ends with the way out
        raise CheckpointError(f"{why}, and no round folder beside it is whole, the newest: {problems[0]}")
    raise CheckpointError(f"{why}, and no round-<r> folder is beside it; resume from another copy of the run, or "
                          "start it again")  # fmt: skip


def _read(folder: Path) -> Checkpoint:
    where = folder / "server.json"
    try:
        head = json.loads(where.read_text())
        where = folder / "server.npz"
        with np.load(where) as arrays:
            state = {name: _decode(tree, arrays) for name, tree in head["state"].items()}
        where = folder / "rows.jsonl"
        rows = [json.loads(line) for line in where.read_text().splitlines()]
        where = folder / "run_config.json"
        run_config = json.loads(where.read_text())
    except Exception as err:  # a damaged file that the manifest could not catch (an unsealed, older checkpoint)
        raise CheckpointError(f"checkpoint file {where} cannot be read ({type(err).__name__}: {err})") from None
    key = head.get("state-key")
    return Checkpoint(folder, int(head["round"]), state, rows, run_config, None if key is None else int(key))


def check_compatible(ckpt: Checkpoint, run_config: dict) -> None:
    """The resuming run must compute what the checkpointed one did: every key but the resumable ones equal. A key
    the checkpoint lacks (added to the suite after it was written) counts as its default, which the run had."""
    from fedsuite.config.run_config import active_schema

    free, schema = resumable_keys(), active_schema()
    then = {k: schema[k].default for k in run_config if k in schema and k not in ckpt.run_config} | ckpt.run_config
    differ = sorted(k for k in set(then) | set(run_config) if k not in free and then.get(k) != run_config.get(k))
    if differ:
        text = ", ".join(f"{k}={run_config.get(k)!r} (checkpoint: {then.get(k)!r})" for k in differ)
        raise CheckpointError(f"cannot resume from {ckpt.folder}: the run config differs in {text}")
    if int(run_config["num-server-rounds"]) <= ckpt.server_round:
        raise CheckpointError(f"the checkpoint is at round {ckpt.server_round}: num-server-rounds must be larger "
                              f"than that to resume (got {run_config['num-server-rounds']})")  # fmt: skip


def recorded_rounds(results: Path) -> list[int]:
    """The rounds the run in `results` recorded (rounds.jsonl), before a resumed recorder drops those after the
    checkpoint; a line that cannot be read (cut by the crash) is skipped."""
    rounds = []
    path = results / "rounds.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rounds.append(int(json.loads(line)["round"]))
        except (ValueError, KeyError, TypeError):
            continue
    return rounds


def check_node_held_state(ckpt: Checkpoint, rounds: list[int]) -> None:
    """Refuse a resume that node-held client state cannot follow exactly.

    Client state the server cannot snapshot (a SuperNode's client-state-dir) is where the crashed run left it. A
    node undoes its last write when the server's restored ledger did not accept it (fedsuite.state.store), but one write
    only: exact while the crashed run trained at most the round after the checkpoint, i.e. recorded no round past
    it. The state is node-held when the ledger accepted replies but the checkpoint's snapshot holds no file."""
    ledger = ckpt.state.get("accepted") or {}
    node_held = any(ledger.values()) and not state_files(ckpt.client_state)
    later = [r for r in rounds if r > ckpt.server_round]
    if node_held and later:
        raise CheckpointError(
            f"cannot resume from {ckpt.folder}: the client state is held by the nodes, which trained past the "
            f"checkpoint's round {ckpt.server_round} (the run recorded round {max(later)}) and cannot go back more "
            "than one round; deployments with node-held client state need checkpoint-every=1"
        )


def restore(strategy, ckpt: Checkpoint, client_state_root: Path | None) -> None:
    """Set the strategy's state and this run's client-state files to the checkpoint's."""
    try:
        strategy.load_state_dict(ckpt.state)
    except ValueError as err:
        raise CheckpointError(f"{ckpt.folder}: the checkpoint does not hold this algorithm's declared state ({err}); "
                              "written by another version?") from None  # fmt: skip
    if client_state_root is None:
        return
    client_state_root.mkdir(parents=True, exist_ok=True)
    for path in state_files(client_state_root):
        path.unlink()
    for path in state_files(ckpt.client_state):
        try:
            _copy(path, client_state_root / path.name)
        except OSError as err:
            live = client_state_root / path.name
            raise CheckpointError(f"restoring {path}: {live} could not be written ({type(err).__name__}: {err}); "
                                  "free space there and resume again") from err  # fmt: skip


def resume_command(results: Path) -> str:
    return f"python -m simulation.run -c \"resume-from='{results}'\""
