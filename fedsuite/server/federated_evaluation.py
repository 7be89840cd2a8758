"""Federated evaluation on the server side: who evaluates a round, which evaluate replies count, and the round's
federated metrics (fed_* columns of the row).

Who: eval-clients=0 → the clients that were sent this round's fit; else eval-clients clients drawn without
replacement from all N by (seed, round) with a numpy Generator. A reply counts when it is no error, its loss and
metrics are finite, its counts are sane and it comes from the partition it was sent to; a reply with 0 test
examples (an empty held-out split) is skipped and counted, never averaged in as zero. Loss and accuracy are
weighted by test examples, validation metrics by validation examples; worst-10 % is the mean accuracy of the
worst ceil(10 %) of the clients that reported one.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import EvaluateRes

from fedsuite.server.replies import RejectedReply, metric_number

WORST_SHARE = 0.1


def eval_cohort(
    server_round: int, seed: int, num_clients: int, eval_clients: int, fit_clients: Collection[int]
) -> list[int]:
    """The partitions that evaluate `server_round`, sorted (module docstring)."""
    if eval_clients <= 0:
        return sorted(fit_clients)
    rng = np.random.default_rng([seed, server_round, 0x4556414C])  # "EVAL"
    return sorted(int(p) for p in rng.choice(num_clients, size=min(eval_clients, num_clients), replace=False))


@dataclass(frozen=True)
class EvalReply:
    partition_id: int
    loss: float
    num_examples: int  # test examples; 0 = empty held-out split
    accuracy: float | None
    val_loss: float | None
    val_accuracy: float | None
    num_val: int


def check_eval_reply(res: EvaluateRes, sent: Collection[int]) -> EvalReply:
    """The reply's figures, or RejectedReply naming what is wrong with it."""
    metrics = dict(res.metrics or {})
    if "error" in metrics:
        raise RejectedReply(str(metrics["error"]), details=str(metrics.get("traceback", "")))
    pid = metric_number(metrics, "partition-id", -1)
    if pid not in sent:
        raise RejectedReply(f"evaluate reply from partition-id {pid}, which was not asked to evaluate this round")
    n, n_val = int(res.num_examples), metric_number(metrics, "n-val", 0)
    if n < 0 or n_val < 0:
        raise RejectedReply(f"evaluate reply counts num_examples={n}, n-val={n_val}: must not be negative")
    figures = {"loss": res.loss, **{k: metrics[k] for k in ("accuracy", "val-loss", "val-accuracy") if k in metrics}}
    for name, value in figures.items():
        if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise RejectedReply(f"evaluate reply's {name} is {value!r}: must be a finite number")
    for name in ("accuracy", "val-accuracy"):
        if name in figures and not 0.0 <= float(figures[name]) <= 1.0:
            raise RejectedReply(f"evaluate reply's {name} is {figures[name]}: must lie in [0, 1]")
    if n == 0 and not metrics.get("empty"):
        raise RejectedReply("evaluate reply has 0 test examples but does not say its held-out split is empty")
    if "val-loss" in figures and n_val == 0:
        raise RejectedReply("evaluate reply has a validation loss but n-val=0")

    def value(key: str) -> float | None:
        return float(figures[key]) if key in figures else None

    return EvalReply(pid, float(res.loss), n, value("accuracy"), value("val-loss"), value("val-accuracy"), n_val)


def federated_metrics(replies: Sequence[EvalReply], rejected: int, failures: int) -> dict[str, Any]:
    """The round's fed_* columns from the accepted replies (in partition order: the float sums do not depend on
    arrival order)."""
    replies = sorted(replies, key=lambda r: r.partition_id)
    tested = [r for r in replies if r.num_examples > 0]
    metrics: dict[str, Any] = {
        "fed_clients": len(tested),
        "fed_skipped": len(replies) - len(tested),
        "fed_failures": failures + rejected,
    }
    if tested:
        metrics["fed_loss"] = _weighted(tested, "num_examples", "loss")
        with_accuracy = [r for r in tested if r.accuracy is not None]
        if with_accuracy:
            metrics["fed_accuracy"] = _weighted(with_accuracy, "num_examples", "accuracy")
            accuracies = sorted(r.accuracy for r in with_accuracy)
            metrics["fed_accuracy_worst10"] = float(np.mean(accuracies[: math.ceil(WORST_SHARE * len(accuracies))]))
            metrics["fed_client_accuracy"] = {str(r.partition_id): r.accuracy for r in with_accuracy}
    validated = [r for r in replies if r.num_val > 0 and r.val_loss is not None]
    if validated:
        metrics["fed_val_loss"] = _weighted(validated, "num_val", "val_loss")
        with_accuracy = [r for r in validated if r.val_accuracy is not None]
        if with_accuracy:
            metrics["fed_val_accuracy"] = _weighted(with_accuracy, "num_val", "val_accuracy")
    return metrics


def _weighted(replies: Sequence[EvalReply], count: str, value: str) -> float:
    """Σ count·value / Σ count over `replies`, in their order (the reply attributes named `count`, `value`)."""
    total = sum(getattr(r, count) for r in replies)
    return sum(getattr(r, count) * getattr(r, value) for r in replies) / total
