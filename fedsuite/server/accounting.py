"""Per-round figures: cohort and replies, communication per client (as sent and as received), client compute time,
the cohort's train loss, FedMIM's local consistency, the clients' largest DP-SGD ε and the round's wall time. A row
is complete when the round's evaluation (or its abort) takes it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedsuite.codec.device_arrays import all_on_device
from fedsuite.rules.rounds import Reply
from fedsuite.server.consistency import local_consistency, local_consistency_on_device


class RoundLog:
    def __init__(self):
        self._started: dict[int, float] = {}
        self._stats: dict[int, dict[str, Any]] = {}

    def started(self, server_round: int) -> None:
        self._started[server_round] = time.perf_counter()

    def sent(self, server_round: int, cohort: int, missing: int, sizes: Sequence[tuple[int, int]], lr: float) -> None:
        """The fit messages of the round: (bytes, vectors) of each."""
        self._stats[server_round] = {
            "cohort": cohort,
            "missing": missing,
            "bytes_down_per_client": float(np.mean([b for b, _ in sizes])) if sizes else 0.0,
            "vectors_down_per_client": float(np.mean([v for _, v in sizes])) if sizes else 0.0,
            "lr": lr,
        }

    def received(
        self, server_round: int, replies: Sequence[Reply], rejected: int, failures: int, private: bool = False
    ) -> dict[str, Any]:
        """The round's reply figures; `private` (client-level DP): no figure computed from single replies' arrays
        (local consistency), and no train loss, which private clients do not report."""
        replies = sorted(replies, key=lambda r: r.partition_id)  # float sums in a fixed order, not arrival order
        stats = self._stats.setdefault(server_round, {})
        stats.update(
            replies=len(replies),
            rejected=rejected,
            failures=failures + stats.get("missing", 0),
            client_compute_seconds=sum(float(r.metrics.get("compute-seconds", 0.0)) for r in replies),
            client_compute_max_seconds=max(
                (float(r.metrics.get("compute-seconds", 0.0)) for r in replies), default=0.0
            ),
            train_loss=None if private else _weighted_loss(replies),
            bytes_up_per_client=float(np.mean([r.uplink_bytes for r in replies])) if replies else 0.0,
            vectors_up_per_client=float(np.mean([len(r.arrays) for r in replies])) if replies else 0.0,
            local_consistency=None if private else _local_consistency(replies),
        )
        epsilons = [float(r.metrics["dp-sgd-epsilon"]) for r in replies if "dp-sgd-epsilon" in r.metrics]
        if epsilons:  # DP-SGD: the largest ε(δ) of the clients that trained (docs/privacy-dp-sgd.md)
            stats["dp_sgd_epsilon"] = max(epsilons)
        return stats

    def note(self, server_round: int, figures: dict[str, Any]) -> None:
        """Further figures of the round for its row (e.g. client-level DP's ε and clip)."""
        self._stats.setdefault(server_round, {}).update(figures)

    def queried(self, server_round: int, down_bytes: int, up_bytes: int, seconds: float) -> None:
        """A query before the fit messages: +1 vector each way per client that took part in both exchanges."""
        stats = self._stats[server_round]
        stats["vectors_down_per_client"] += 1
        stats["bytes_down_per_client"] += down_bytes
        stats["query"] = (up_bytes, seconds)

    def settle_query(self, server_round: int) -> None:
        stats = self._stats.get(server_round, {})
        if "query" not in stats:
            return
        up_bytes, seconds = stats.pop("query")
        if stats.get("replies"):
            stats["vectors_up_per_client"] += 1
            stats["bytes_up_per_client"] += up_bytes
        stats["client_compute_seconds"] += seconds

    def missing(self, server_round: int) -> int:
        return int(self._stats.get(server_round, {}).get("missing", 0))

    def add_missing(self, server_round: int, count: int) -> None:
        self._stats[server_round]["missing"] += count

    def cohort(self, server_round: int, default: int) -> int:
        return int(self._stats.get(server_round, {}).get("cohort", default))

    def row(self, server_round: int, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """The round's row (its figures are taken: a round's row is made once)."""
        row: dict[str, Any] = {"round": server_round, **(metrics or {}), **self._stats.pop(server_round, {})}
        row.pop("missing", None)
        row.pop("query", None)
        if server_round in self._started:
            row["round_seconds"] = round(time.perf_counter() - self._started.pop(server_round), 4)
        return row


def _local_consistency(replies: Sequence[Reply]) -> float | None:
    """FedMIM's (1/S) Σ_i ‖x_{i,K} − mean_S x_{j,K}‖², from the displacements when they are sent."""
    if not replies or "delta" not in replies[0].arrays:
        return None
    if all_on_device([r.arrays for r in replies], "delta"):  # there, to float64 rounding (docs/running/batched.md)
        return local_consistency_on_device([r.arrays.tensor("delta") for r in replies])
    return local_consistency([r.arrays["delta"] for r in replies])


def start_loss(replies: Sequence[Reply]) -> float | None:
    """The cohort's loss at the received model before any local step (each reply's `first-loss`, weighted by its
    examples); None unless every reply reports it."""
    if not replies or any("first-loss" not in r.metrics for r in replies):
        return None
    n = sum(r.num_examples for r in replies)
    return float(sum(r.num_examples * float(r.metrics["first-loss"]) for r in replies) / n)


def _weighted_loss(replies: Sequence[Reply]) -> float | None:
    if not replies or all("loss" not in r.metrics for r in replies):  # DP-SGD clients send no training loss
        return None
    n = sum(r.num_examples for r in replies)
    return float(sum(r.num_examples * float(r.metrics.get("loss", 0.0)) for r in replies) / n)
