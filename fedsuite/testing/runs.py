"""One run of an algorithm in process, observed round by round: `run_algorithm` returns a KitRun (x⁰, every
round's model, cohort and results row) and checks invariants after every aggregation; `client_vector` reads a
client's state as it will train with it next (fedsuite.testing.kit describes them)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsuite.testing.federations import LSQ

Invariant = Callable[..., None]  # invariant(strategy), optionally with keywords server_round and cohort


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
        # it reads strategy.x, a host array; invariants read the rule's own attributes as NumPy arrays, so a run
        # with invariants keeps its rule on the host (fedsuite/server/placement.py)
        watches_vectors = bool(invariants)

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
                  observers: Iterable[Any] = (), **options) -> KitRun:  # fmt: skip
    """Run `algorithm` in process on `run_config` (over LSQ's keys); `observers` (RoundObserver) watch it beside the
    kit's own; `options` go to run_inprocess (record, …)."""
    from fedsuite.run.inprocess import run_inprocess

    models: dict[int, np.ndarray] = {}
    rows: list[dict] = []
    cohorts: dict[int, tuple[int, ...]] = {}
    cfg = {**LSQ, **(run_config or {}), "algorithm": algorithm}
    strategy = run_inprocess(cfg, observers=[_observer(tuple(invariants), models, rows, cohorts), *observers],
                             **options)  # fmt: skip
    by_round = {row["round"]: row for row in rows}
    rounds = [RoundObservation(r, x, by_round.get(r, {}), cohorts[r]) for r, x in sorted(models.items())]
    x0 = np.asarray(strategy.plan.initial_x, dtype=np.float32).copy()
    return KitRun(np.array(strategy.x, copy=True), rounds, strategy, x0)


def client_vector(strategy, partition: int, name: str) -> np.ndarray:
    """Client `partition`'s declared state `name` as it will train with it next (zeros before its first
    participation), for invariants: the state the server has accepted, never a rejected round's."""
    from fedsuite.run.inprocess import client_store
    from fedsuite.state.tier import effective

    view = effective(client_store(strategy, partition), strategy.accepted.get(partition, 0))
    return np.asarray(view[name], np.float64) if name in view else np.zeros(strategy.dim)
