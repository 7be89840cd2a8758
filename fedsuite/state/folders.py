"""Where a run's client-state files live, and whose they are (docs/running/scale.md#where-client-state-lives).

`state_root` picks the folder the server and every client agree on: for memory state a per-run folder in RAM
(/dev/shm when the machine has it, else the temporary folder), removed when the run ends (checkpoints keep copies);
for disk state `client-state-dir`, or a per-run temporary folder. A folder belongs to one run: `owner.json` records
its state key (and results folder), written by the server before training and by a client before its first file;
`check_owner` refuses a folder that holds another run's vectors, or vectors without an owner record, and `claim`
records the owner so that of two runs claiming one folder at once the second is refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from fedsuite.codec.npy_bytes import member_names as npz_members
from fedsuite.codec.npy_bytes import read_member as read_npz_member
from fedsuite.state.files import read_arrays

SHARED_MEMORY = Path("/dev/shm")

STATE_SUFFIX = ".state"  # a partition's client-state file: partition-<id>.state (fedsuite.state.files)
LEGACY_SUFFIX = ".npz"  # the same, as versions before this format wrote it
STATE_FILE_PATTERNS = (f"partition-*{STATE_SUFFIX}", f"partition-*{LEGACY_SUFFIX}", f"previous-*{STATE_SUFFIX}")

OWNER = "owner.json"  # in a client-state folder: the state key of the run whose vectors it holds


def state_root(where: str, configured: str, run_id: int) -> Path:
    """The folder of a run's client-state files: `where` is choose_backend's answer, `configured` the
    client-state-dir (used by disk mode only), `run_id` Flower's run id (the same on server and clients)."""
    if where == "disk" and configured:
        return Path(configured).expanduser()
    if where == "memory":
        base = SHARED_MEMORY if SHARED_MEMORY.is_dir() else Path(tempfile.gettempdir())
        return base / "fedsuite-client-state-memory" / f"run-{run_id}"
    return Path(tempfile.gettempdir()) / "fedsuite-client-state" / f"run-{run_id}"


def state_folder(where: str, configured: str) -> Path:
    """The file system a run's client state goes to (state_root without the per-run part)."""
    if where == "disk" and configured:
        return Path(configured).expanduser()
    return state_root(where, "", 0).parent


def is_run_scoped(root: Path, run_id: int) -> bool:
    """True for the per-run folders state_root makes up (removed at the end of the run), not a configured one."""
    return root.name == f"run-{run_id}" and root.parent.name.startswith("fedsuite-client-state")


def state_files(root: Path) -> list[Path]:
    """The client-state files in `root`, sorted: this version's `partition-<id>.state` and the `.npz` files of
    earlier versions (a resumed run's checkpoint may hold them; the file tier reads them and writes the new
    format)."""
    root = Path(root)
    return sorted(path for pattern in STATE_FILE_PATTERNS for path in root.glob(pattern))


def file_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of one client-state file (this version's format or an earlier version's `.npz`), by name."""
    path = Path(path)
    if path.suffix == LEGACY_SUFFIX:
        return {name: read_npz_member(path, name) for name in npz_members(path)}
    return read_arrays(path)


class StateFolderTaken(ValueError):
    """A client-state folder holds another run's client state (or vectors of unknown origin)."""


def owner(root: Path) -> dict | None:
    """The owner record of a client-state folder ({"state-key": …, "results": …}), None when there is none; an
    unreadable record counts as a foreign owner."""
    path = Path(root) / OWNER
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        return record if isinstance(record, dict) and "state-key" in record else {"state-key": "?"}
    except (OSError, ValueError):
        return {"state-key": "?"}


def refuse_foreign(record: dict | None, holds_vectors: bool, state_key, where: str, key: str) -> None:
    """The ownership rule every tier applies: a place with vectors or an owner record is this run's only when its
    record names `state_key`; otherwise StateFolderTaken, saying whose state it holds and the ways out. `where`
    names the place (a folder), `key` the setting that chose it."""
    if record is None and not holds_vectors:
        return
    if record is not None and state_key is not None and str(record["state-key"]) == str(state_key):
        return
    results = record.get("results") if record else None
    if record is None:
        whose = "client-state files of an unknown run (no owner record)"
    else:
        whose = f"the client state of another run (state key {record['state-key']}"
        whose += f", results {results})" if results else ")"
    resume = f"resume-from='{results}'" if results else "resume-from=<its results folder>"
    raise StateFolderTaken(
        f"{key}={where!r} holds {whose}; a run never starts from another run's client state: choose another "
        f"{key}, or empty this one (its partition-* and previous-* files and {OWNER}); to continue that run, resume "
        f"it ({resume})"
    )


def check_owner(root: Path, state_key: int | str | None, key: str = "client-state-dir") -> None:
    """A run uses only its own client state: refuse `root` when it holds vectors of another run (its owner record
    names another state key) or of no known run (partition files without an owner record). `state_key`: the run's
    (a resumed run's: its checkpoint's); None for a run whose key is not known yet (a new run before Flower
    starts), which accepts only a folder without vectors or owner."""
    root = Path(root)
    refuse_foreign(owner(root), root.is_dir() and bool(state_files(root)), state_key, str(root), key)


def claim(root: Path, state_key: int | str, results: str | None = None, key: str = "client-state-dir") -> None:
    """check_owner, then record this run as the folder's owner. The record is written whole beside the folder's
    files and linked into place, so it appears complete or not at all, and of two runs that claim one folder at
    once the second is refused."""
    root = Path(root)
    check_owner(root, state_key, key)
    if owner(root) is not None:
        return
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{OWNER}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"state-key": str(state_key), "results": results}, f)
        os.link(tmp, root / OWNER)
    except FileExistsError:
        check_owner(root, state_key, key)  # another process claimed it just now: ours, or refused
    finally:
        Path(tmp).unlink(missing_ok=True)
