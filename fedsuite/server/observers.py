"""Round observers: what in-process runs, studies and tests subscribe to instead of replacing strategy methods.

An observer overrides the events it cares about; every method of the base does nothing. Observers see the round's
data after it is validated and may not change it; `screen` is the one intervention, for fault injection in tests
(a reply an observer screens out is rejected and logged like any invalid reply)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedsuite.rules.rounds import Answer, Reply


class RoundObserver:
    # Whether it reads the round's vectors (x, the downlink, the replies' arrays) as host arrays: a run with such an
    # observer keeps its rule on the host (fedsuite/server/placement.py). None: it does where its class overrides
    # one of the events that hand it vectors (VECTOR_EVENTS). `strategy.x` is a host array either way.
    watches_vectors: bool | None = None

    def queried(self, server_round: int, x: np.ndarray, answers: Mapping[int, Answer]) -> None:
        """The valid answers to the rule's pre-round query, and the model they were computed at."""

    def sent(self, server_round: int, x: np.ndarray, downlink: Mapping[str, np.ndarray]) -> None:
        """The model and the rule's downlink every sampled client gets this round (per-client arrays not included)."""

    def failed(self, server_round: int, failures: list) -> None:
        """Flower's failures of the round's fit messages (transport or worker), before anything else is done."""

    def screen(self, server_round: int, reply: Reply) -> str | None:
        """A reason to reject this validated reply, or None."""
        return None

    def replied(self, server_round: int, replies: list[Reply]) -> None:
        """The accepted replies, in partition order, just before the rule aggregates them."""

    def aggregated(self, server_round: int, strategy: Any, x_before: np.ndarray, replies: list[Reply]) -> None:
        """After the aggregate: `strategy.rule` (its x and state) and `strategy.accepted` are the round's new ones."""

    def recorded(self, row: dict[str, Any]) -> None:
        """A results row (round 0 is the initial model's evaluation)."""

    def ended(self, status: str, reason: str | None = None) -> None:
        """The run is over: `status` is completed, failed, interrupted, diverged or stalled (`reason` says why when
        it did not complete). Called once, by the round loop (fedsuite.server.loop)."""


VECTOR_EVENTS = ("queried", "sent", "screen", "replied", "aggregated")


def watches_vectors(observer: RoundObserver) -> bool:
    """`observer.watches_vectors`, or, where it says None, whether its class overrides one of VECTOR_EVENTS."""
    said = getattr(observer, "watches_vectors", None)
    if said is not None:
        return bool(said)
    return any(getattr(type(observer), event, None) is not getattr(RoundObserver, event) for event in VECTOR_EVENTS)
