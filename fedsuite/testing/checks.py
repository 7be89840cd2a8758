"""The kit's checks of an algorithm's claims, each on real in-process runs: reductions (one algorithm equals another
bit for bit), checkpoint and resume, communication against the declarations, and declared client state
(fedsuite.testing.kit describes them). Each raises AssertionError with a one-line reason when the claim fails."""

from __future__ import annotations

import json
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fedsuite.config.run_config import resolve
from fedsuite.registry import costs
from fedsuite.state.plan import client_specs
from fedsuite.testing.federations import LSQ, PARTIAL
from fedsuite.testing.runs import KitRun, run_algorithm


# ---- reductions ------------------------------------------------------------------------------------------------
def _first_difference(a: KitRun, b: KitRun) -> str | None:
    if [r.round for r in a.rounds] != [r.round for r in b.rounds]:
        return f"rounds {[r.round for r in a.rounds]} vs {[r.round for r in b.rounds]}"
    for ra, rb in zip(a.rounds, b.rounds, strict=True):
        if not identical(ra.x, rb.x):
            gap = float(np.max(np.abs(ra.x.astype(np.float64) - rb.x.astype(np.float64))))
            return f"the models differ after round {ra.round} (max |Δ| = {gap:.3e})"
    return None if identical(a.x, b.x) else "the final models differ"


def check_reduction(a: str, b: str, run_config: Mapping[str, Any] | None = None, a_keys: Mapping | None = None,
                    b_keys: Mapping | None = None, knob: Mapping | None = None) -> None:  # fmt: skip
    """Algorithm `a` with `a_keys` equals `b` with `b_keys` bit for bit (every round's model) on `run_config`
    (default PARTIAL); with `knob` given, `a` with `knob` added must differ from `b` (the reduction is not vacuous)."""
    base = {**PARTIAL, **(run_config or {})}
    run_a = run_algorithm(a, {**base, **(a_keys or {})})
    run_b = run_algorithm(b, {**base, **(b_keys or {})})
    problem = _first_difference(run_a, run_b)
    assert problem is None, f"{a} {dict(a_keys or {})} is not {b} {dict(b_keys or {})} bit for bit: {problem}"
    if knob:
        turned = run_algorithm(a, {**base, **(a_keys or {}), **knob})
        assert _first_difference(turned, run_b) is not None, (
            f"{a} with {dict(knob)} still equals {b}: the knob is inert"
        )


# ---- checkpoint and resume -------------------------------------------------------------------------------------
def identical(a: Any, b: Any) -> bool:
    """Bitwise equality of checkpointable values (arrays by bytes, dtype and shape; containers recursively)."""
    if isinstance(a, np.ndarray | np.generic):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, set | frozenset):
        return type(a) is type(b) and a == b
    if isinstance(a, list | tuple | deque):
        return type(a) is type(b) and len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and (a == b or (a != a and b != b))


def _checkpointed_client_state(folder: Path) -> dict[str, dict[str, np.ndarray]]:
    from fedsuite.results import checkpoint
    from fedsuite.state.folders import file_arrays, state_files

    return {path.name: file_arrays(path) for path in state_files(checkpoint.load(folder).client_state)}


def check_checkpoint_round_trip(algorithm: str, folder: Path | str | None = None,
                                run_config: Mapping[str, Any] | None = None, stop_after: int = 3,
                                rounds: int = 5) -> None:  # fmt: skip
    """A run of `algorithm` stopped after `stop_after` rounds and resumed to `rounds` equals the uninterrupted run bit
    for bit: the model, the declared server state and every client's state file; the resumed run continues the
    results rows. Runs are written under `folder` (default: a temporary folder)."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="fedsuite-kit-") as tmp:
            return check_checkpoint_round_trip(algorithm, tmp, run_config, stop_after, rounds)

    folder = Path(folder)
    cfg = {**PARTIAL, "checkpoint-every": stop_after, **(run_config or {}), "out-dir": str(folder),
           "num-server-rounds": rounds}  # fmt: skip
    full = run_algorithm(algorithm, {**cfg, "run-name": "full"}, record=True).strategy
    run_algorithm(algorithm, {**cfg, "run-name": "part", "num-server-rounds": stop_after}, record=True)
    resume = {**cfg, "run-name": "resumed", "resume-from": str(folder / "part")}
    resumed = run_algorithm(algorithm, resume, record=True).strategy
    assert identical(resumed.x, full.x), f"{algorithm}: the resumed model differs from the uninterrupted run's"
    state_full, state_resumed = full.state_dict(), resumed.state_dict()
    assert state_full.keys() == state_resumed.keys(), (
        f"{algorithm}: state {sorted(state_resumed)} vs {sorted(state_full)}"
    )
    differ = [k for k in state_full if not identical(state_full[k], state_resumed[k])]
    assert not differ, f"{algorithm}: after resuming, the declared server state differs in {differ}"
    clients_full, clients_resumed = (
        _checkpointed_client_state(folder / "full"),
        _checkpointed_client_state(folder / "part"),
    )
    assert identical(clients_full, clients_resumed), f"{algorithm}: after resuming, the client state differs"
    if costs.client_state_vectors(algorithm, full.plan.run_config):
        assert clients_full, f"{algorithm} declares client state but no client wrote any"
    written = [json.loads(line)["round"] for line in (folder / "part" / "rounds.jsonl").read_text().splitlines()]
    assert written == list(range(rounds + 1)), f"{algorithm}: the resumed run's rows are for rounds {written}"


# ---- communication ---------------------------------------------------------------------------------------------
def check_communication(algorithm: str, run_config: Mapping[str, Any] | None = None) -> tuple[int, int, int]:
    """In every round, the d-vectors down and up per participating client (and bytes up) measured by the server
    equal what the registry derives from the algorithm's declarations; returns the declaration (down, up, up_some)."""
    from fedsuite.server.sampling import Sampler

    cfg = resolve({**PARTIAL, **(run_config or {}), "algorithm": algorithm})
    down, up, up_some = costs.communication(algorithm, cfg)
    run = run_algorithm(algorithm, dict(cfg))
    sampler = Sampler.of_run(cfg)
    size = int(cfg["tracking-clients"]) if "tracking-clients" in cfg else 0
    trained = [r for r in run.rounds if r.round > 0]
    assert trained, f"{algorithm}: no round was aggregated"
    for obs in trained:
        row, cohort = obs.row, sampler.cohort(obs.round)
        measured_up = up + up_some * len(sampler.tracking(obs.round, cohort, size)) / len(cohort)
        where = f"{algorithm} round {obs.round}"
        got_down, got_up, got_bytes = (
            row["vectors_down_per_client"],
            row["vectors_up_per_client"],
            row["bytes_up_per_client"],
        )
        assert got_down == down, f"{where}: {got_down} d-vectors down per client, declared {down}"
        assert abs(got_up - measured_up) < 1e-12, f"{where}: {got_up} d-vectors up per client, declared {measured_up}"
        expected_bytes = measured_up * run.strategy.dim * 4
        assert abs(got_bytes - expected_bytes) < 1e-6, (
            f"{where}: {got_bytes} bytes up per client, not {measured_up} d-vectors"
        )
    return down, up, up_some


# ---- client state ----------------------------------------------------------------------------------------------
@contextmanager
def _reads_of_saved_state() -> Iterator[set[str]]:
    """The names of client vectors read (`ClientState.get`) while a saved value of them existed, during the block."""
    from fedsuite.state.client_state import ClientState

    names: set[str] = set()
    original = ClientState.get

    def get(self, name):
        self._reconcile()  # the store as the client trains with it (an unconfirmed write undone)
        if name in self.store:
            names.add(name)
        return original(self, name)

    ClientState.get = get
    try:
        yield names
    finally:
        ClientState.get = original


def check_client_state(algorithm: str, run_config: Mapping[str, Any] | None = None, rounds: int = 3) -> tuple[str, ...]:
    """Every d-vector the client of `algorithm` declares (`state_specs`) is client state in fact: on `run_config`
    (default LSQ: every client in every round) for `rounds` rounds, it is saved after an accepted reply, changes
    between two rounds of some client (the clients trained), and is read back (`self.state.get`) in a client's next
    round. The client state every algorithm keeps for the model under the run config (relaxed-init's last local model)
    is checked with it. Returns the vectors checked (none for a stateless client)."""
    from fedsuite.run.inprocess import client_store
    from fedsuite.state.tier import effective

    cfg = resolve({**LSQ, "eval-every": 1000, **(run_config or {}), "num-server-rounds": rounds,
                   "algorithm": algorithm})  # fmt: skip
    specs = client_specs(cfg)  # the algorithm's declaration and the model's own (fedsuite.state.plan)
    names = tuple(spec.name for spec in specs if spec.units)
    if not names:
        return ()
    saved: dict[tuple[str, int], list[np.ndarray | None]] = {}  # (vector, partition) → its value after each round

    def saved_after_accepted_replies(strategy, server_round, cohort):
        for pid in cohort:
            if strategy.accepted.get(pid) == server_round:
                view = effective(client_store(strategy, pid), server_round)
                for name in names:
                    saved.setdefault((name, pid), []).append(view.get(name))

    with _reads_of_saved_state() as read:
        run_algorithm(algorithm, dict(cfg), invariants=[saved_after_accepted_replies])
    assert saved, f"{algorithm}: no reply was accepted in {rounds} rounds, so no client state could be checked"
    for name in names:
        where = f"{algorithm}: declared client state {name!r}"
        values = [v for (n, _), series in saved.items() if n == name for v in series]
        assert any(v is not None for v in values), (
            f"{where} stays absent after every accepted reply: the client never saves it; call "
            f"self.state.set({name!r}, …) after the local loop (the client's uplink)"
        )
        assert any(v is not None and np.any(v) for v in values), (
            f"{where} stays zero although the clients trained in {rounds} rounds: the client never saves a new "
            f"value; call self.state.set({name!r}, …) after the local loop (the client's uplink)"
        )
        changed = any(_changes(series) for (n, _), series in saved.items() if n == name)
        assert changed, (
            f"{where} never changes although the clients trained in {rounds} rounds: every save of a client keeps "
            "the value before"
        )
        assert name in read, (
            f"{where} is saved but never read back in a client's next round: read it with self.state.get({name!r}) "
            "before the local loop"
        )
    return names


def _changes(series: list[np.ndarray | None]) -> bool:
    """Whether one client's saved values differ between two of its rounds (its only value: from the zeros)."""
    present = [value for value in series if value is not None]
    if len(present) == 1:
        return bool(np.any(present[0]))
    return any(not np.array_equal(a, b) for a, b in zip(present[:-1], present[1:], strict=True))
