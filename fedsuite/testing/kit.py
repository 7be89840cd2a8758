"""The verification kit: what fedsuite's own tests check of every algorithm, as public API for plug-in algorithms.

Every check runs the real thing (`fedsuite.run.inprocess.run_inprocess`: the ServerApp's strategy, the ClientApp's
clients, Flower's round loop) on a small heterogeneous least-squares federation, and raises AssertionError with a
one-line reason when the claim does not hold, so a plug-in's pytest file is a few calls:

    from fedsuite import testing as kit

    def test_beta_zero_is_fedavg():
        kit.check_reduction("fedavgm", "fedavg", a_keys={"fedavgm-beta": 0.0}, knob={"fedavgm-beta": 0.5})

The federation (`dataset='synthetic-lsq'`):

    LSQ                     5 clients, all in every round, full-batch local steps: deterministic, with a closed-form
                            optimum; where drift-free methods reach x* and FedAvg stalls at its drift bias
    PARTIAL                 6 clients, 3 a round, minibatches, weight decay: partial participation and a data order,
                            for reductions, checkpoints and communication
    least_squares(cfg)      its clients' (A_i, b_i) in float64 and the numpy x* of f(x) = mean_i F_i(x) + (wd/2)‖x‖²,
                            F_i(x) = (1/2n_i)‖A_i x − b_i‖², in closed form; `.relative_error(x)` = ‖x − x*‖ / ‖x*‖

What the kit runs and checks:

    run_algorithm(name, cfg, invariants=[...])   one run in process; returns a KitRun: x⁰ (the round-0 model), the
                            final x, and per round the model after aggregation, the sampled cohort and the results
                            row (losses, relative error, d-vectors and bytes per client); each invariant is called
                            with the strategy after every aggregation (`strategy.rule` is the algorithm's server rule
                            with its declared state, `client_vector` reads a client's state), and with the keywords
                            `server_round` and `cohort` (the round's sampled partition ids) where its signature takes
                            them; it may raise: the run stops and the error names the round
    check_reduction(a, b, ...)   with these settings algorithm a equals algorithm b bit for bit, the model after
                            every round; with `knob` added to a's settings they differ (the knob really acts)
    check_checkpoint_round_trip(name, folder, ...)   a run stopped after round r and resumed to R ends bit-identical
                            to the uninterrupted R-round run: model, declared server state, every client's state
    check_communication(name, ...)   the d-vectors down/up per client measured in every round equal the registry's,
                            which are derived from the rule's declarations (`sends`, `sends_each`, `uplink`, …)
    check_client_state(name, ...)   every declared client vector is saved after an accepted reply, changes while
                            the clients train, and is read back in the client's next round

For a float64 reference written beside the run (docs/own/algorithm.md, "A float64 reference"):

    minibatch_order(partition, round, cfg)   the minibatches client `partition`'s local loop trains on in `round`,
                            step by step: their rows of the client's data (`least_squares(cfg).clients[partition]`),
                            the inputs and targets as the loop saw them, and the fixed block; replayed from the
                            loop's own batch source and generator of (seed, round, partition)

Nothing here imports tests/; fedsuite's own tests (tests/test_kit.py) check the kit on the built-ins.
"""

from __future__ import annotations

import inspect
import json
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fedsuite.config.run_config import resolve
from fedsuite.registry import costs
from fedsuite.rules.declared import model_state

__all__ = [
    "LSQ", "PARTIAL", "KitRun", "LeastSquares", "Minibatch", "RoundObservation", "check_checkpoint_round_trip",
    "check_client_state", "check_communication", "check_reduction", "client_vector", "identical", "least_squares",
    "minibatch_order", "run_algorithm",
]  # fmt: skip

LSQ: dict[str, Any] = {
    "dataset": "synthetic-lsq",
    "num-clients": 5,
    "clients-per-round": 5,
    "synthetic-dim": 4,
    "synthetic-samples": 20,
    "synthetic-heterogeneity": 1.0,
    "batch-size": 0,
    "local-steps": 10,
    "lr": 0.05,
    "num-server-rounds": 20,
    "eval-every": 1,
}
PARTIAL: dict[str, Any] = {
    **LSQ,
    "num-clients": 6,
    "clients-per-round": 3,
    "synthetic-dim": 5,
    "synthetic-samples": 12,
    "batch-size": 4,
    "local-steps": 3,
    "lr": 0.02,
    "weight-decay": 0.01,
    "num-server-rounds": 5,
    "eval-every": 1000,
}

Invariant = Callable[..., None]  # invariant(strategy), optionally with keywords server_round and cohort


# ---- the least-squares federation and its optimum -------------------------------------------------------------
@dataclass(frozen=True)
class LeastSquares:
    clients: list[tuple[np.ndarray, np.ndarray]]  # (A_i, b_i), float64
    weight_decay: float

    @cached_property
    def x_star(self) -> np.ndarray:
        """argmin mean_i (1/2n_i)‖A_i x − b_i‖² + (wd/2)‖x‖², from the normal equations."""
        dim = self.clients[0][0].shape[1]
        hessian = np.mean([a.T @ a / len(b) for a, b in self.clients], axis=0) + self.weight_decay * np.eye(dim)
        return np.linalg.solve(hessian, np.mean([a.T @ b / len(b) for a, b in self.clients], axis=0))

    def relative_error(self, x: np.ndarray) -> float:
        return float(np.linalg.norm(np.asarray(x, np.float64) - self.x_star) / np.linalg.norm(self.x_star))


def least_squares(run_config: Mapping[str, Any] | None = None) -> LeastSquares:
    """The federation `run_config` (default LSQ) trains on, as numpy data."""
    from fedsuite.data import load_dataset

    cfg = resolve({**LSQ, **(run_config or {})})
    fed = load_dataset(cfg)
    clients = [(np.asarray(fed.features_x[p], np.float64), np.asarray(fed.targets[p], np.float64))
               for p in fed.client_parts]  # fmt: skip
    return LeastSquares(clients, float(cfg["weight-decay"]))


# ---- one run, observed ---------------------------------------------------------------------------------------
@dataclass
class RoundObservation:
    round: int
    x: np.ndarray  # the global model after this round's aggregation
    row: dict[str, Any] = field(default_factory=dict)  # the round's results row
    cohort: tuple[int, ...] = ()  # the partition ids the server sampled for this round


@dataclass
class KitRun:
    """One run: `x0` is x⁰, the round-0 model the server built from the seed (a resumed run's is its first run's);
    `rounds` holds one observation per aggregated round, in order from round 1 (a resumed run's from the round after
    its checkpoint), so x⁰ and `rounds` are every model of the run."""

    x: np.ndarray  # the final global model
    rounds: list[RoundObservation]
    strategy: Any  # fedsuite.server.adapter.RuleStrategy (`.rule`, `.state_dict()`, `.plan`)
    x0: np.ndarray | None = None  # x⁰, float32 like x


def _observer(invariants: Iterable[Invariant], models: dict[int, np.ndarray], rows: list[dict],
              cohorts: dict[int, tuple[int, ...]]):  # fmt: skip
    from fedsuite.server.observers import RoundObserver

    class KitObserver(RoundObserver):
        def aggregated(self, server_round, strategy, x_before, replies):
            models[server_round] = np.array(strategy.x, copy=True)
            cohorts[server_round] = tuple(int(pid) for pid in strategy.plan.sampler.cohort(server_round))
            context = {"server_round": server_round, "cohort": list(cohorts[server_round])}
            for invariant in invariants:
                try:
                    invariant(strategy, **_keywords_taken(invariant, context))
                except Exception as err:
                    name = getattr(invariant, "__name__", repr(invariant))
                    raise AssertionError(f"invariant {name} fails after round {server_round}: {err}") from err

        def recorded(self, row):
            rows.append(dict(row))

    return KitObserver()


def _keywords_taken(invariant: Invariant, context: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `context` that `invariant` accepts as keywords (all of them for **kwargs): an invariant
    written as `f(strategy)` keeps working beside `f(strategy, server_round, cohort)`."""
    try:
        params = inspect.signature(invariant).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(context)
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = {p.name for p in params if p.kind in by_name}
    return {k: v for k, v in context.items() if k in named}


def run_algorithm(algorithm: str, run_config: Mapping[str, Any] | None = None, invariants: Iterable[Invariant] = (),
                  **options) -> KitRun:  # fmt: skip
    """Run `algorithm` in process on `run_config` (over LSQ's keys); `options` go to run_inprocess (record, …)."""
    from fedsuite.run.inprocess import run_inprocess

    models: dict[int, np.ndarray] = {}
    rows: list[dict] = []
    cohorts: dict[int, tuple[int, ...]] = {}
    cfg = {**LSQ, **(run_config or {}), "algorithm": algorithm}
    strategy = run_inprocess(cfg, observers=[_observer(tuple(invariants), models, rows, cohorts)], **options)
    by_round = {row["round"]: row for row in rows}
    rounds = [RoundObservation(r, x, by_round.get(r, {}), cohorts[r]) for r, x in sorted(models.items())]
    x0 = np.asarray(strategy.plan.initial_x, dtype=np.float32).copy()
    return KitRun(np.array(strategy.x, copy=True), rounds, strategy, x0)


def client_vector(strategy, partition: int, name: str) -> np.ndarray:
    """Client `partition`'s declared state `name` as it will train with it next (zeros before its first
    participation), for invariants: the state the server has accepted, never a rejected round's."""
    from fedsuite.run.inprocess import client_store
    from fedsuite.state.store import effective

    view = effective(client_store(strategy, partition), strategy.accepted.get(partition, 0))
    return np.asarray(view[name], np.float64) if name in view else np.zeros(strategy.dim)


# ---- the local loop's minibatches, replayed ---------------------------------------------------------------------
@dataclass(frozen=True)
class Minibatch:
    """What one local step trained on: a float64 reference takes `rows` of the client's data, or `inputs` and
    `targets` themselves (the same rows, augmented as the loop saw them where the dataset crops and flips)."""

    step: int  # k, the local step that trained on it, from 0
    rows: np.ndarray  # its samples' positions in the client's training rows, in the order the loop took them
    inputs: np.ndarray  # float64
    targets: np.ndarray  # float64 for regression, the integer labels for classification
    block: int | None = None  # the fixed data block j of the step (block sources: local-batches='blocks'), else None


def minibatch_order(partition: int, server_round: int, run_config: Mapping[str, Any] | None = None, *,
                    steps: int | None = None, source: Callable | None = None) -> list[Minibatch]:  # fmt: skip
    """The minibatches client `partition`'s local loop trains on in round `server_round` of `run_config` (over LSQ's
    keys), one per local step, in order: drawn by the loop's batch source (fedsuite.local.loop.plain_batches, or the
    client's fixed blocks under local-batches='blocks') from the generator the client trains with, a function of
    (seed, round, partition) only (fedsuite.node.holdings.ClientNode.generator). The client's training rows are its
    partition
    (`least_squares(run_config).clients[partition]`) unless validation-fraction or a local test share holds some out.

    `steps`: K_i where the server's system model sets it per client (local-work, round-deadline: the reply's
    `steps`); default the run config's local-steps (0: epoch mode). `source`: the client rule's own
    `UpdateRule.batches`, for a client that sets one; it is called twice, for the batches and for their rows."""
    from fedsuite.data import with_data_clients
    from fedsuite.node.holdings import ClientNode

    cfg = with_data_clients(resolve({**LSQ, **(run_config or {})}))
    if not 0 <= partition < cfg.num_clients:
        raise ValueError(f"partition={partition}: the run has clients 0..{cfg.num_clients - 1} (num-clients)")
    if server_round < 1:
        raise ValueError(f"server_round={server_round}: clients train in rounds 1, 2, …")
    node, local = ClientNode(cfg, partition, cfg.num_clients), cfg.local
    data = node.data
    source = source or _loop_source(cfg, len(data), partition)
    shape = (local.epochs, local.steps if steps is None else steps, local.batch_size)
    positions = _positions(len(data), data.crop_pad)
    drawn = source(data, *shape, node.generator(server_round))
    replayed = source(positions, *shape, node.generator(server_round))  # the same draws, on the rows' positions
    steps_drawn = enumerate(zip(drawn, replayed, strict=True))
    return [Minibatch(k, _host(rows).astype(np.int64), _host(inputs).astype(np.float64), _targets(targets), block)
            for k, ((inputs, targets, block), (_, rows, _)) in steps_drawn]  # fmt: skip


def _loop_source(cfg, num_samples: int, partition: int) -> Callable:
    """The batch source the client's loop draws from when its rule sets none (RuleClient.prepare): the client's
    fixed blocks under local-batches='blocks', else fedsuite.local.loop.plain_batches."""
    from fedsuite.local.loop import plain_batches
    from fedsuite.local.variance import FixedBlocks

    if cfg.local.local_batches == "blocks":
        return FixedBlocks(num_samples, cfg.local.blocks, cfg.seed, partition)  # as ClientRule.blocks builds them
    return plain_batches


def _positions(n: int, crop_pad: int):
    """LocalData whose targets are the row positions 0..n−1 (its inputs are placeholders a crop-and-flip can act
    on: drawn from a generator, the batches' targets are then the rows the loop takes)."""
    import torch

    from fedsuite.local.loop import LocalData

    return LocalData(torch.zeros((n, 1, 1, 1)), torch.arange(n), crop_pad)


def _host(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _targets(tensor) -> np.ndarray:
    values = _host(tensor)
    return values.astype(np.float64) if np.issubdtype(values.dtype, np.floating) else values


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
    from fedsuite.state.store import file_arrays, state_files

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
    from fedsuite.state.store import ClientState

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
    from fedsuite.state.store import effective

    cfg = resolve({**LSQ, "eval-every": 1000, **(run_config or {}), "num-server-rounds": rounds,
                   "algorithm": algorithm})  # fmt: skip
    specs = costs.client_state(algorithm, cfg) + model_state(cfg.buffers, cfg.local.relaxed_init)
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
