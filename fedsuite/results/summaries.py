"""What a run says of itself: the final statuses, summary.json's derived figures (against the initial model, the
replies lost), the DP noise label, the progress line of each round, the closing line a run ends with, and the steady
time per round the study reports and benchmarks use.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedsuite.config.settings import value_of

# Final statuses, with the exit code simulation.run gives each (interrupted: 128 + the signal's number).
STATUSES = {"completed": 0, "budget-spent": 0, "pruned": 0, "failed": 1, "diverged": 3, "interrupted": 130}
# Runs that ended as their config asked: every round, or as many as dp-target-epsilon allowed (docs/privacy.md).
# Studies average them, reuse them and exit 0 for them.
FINISHED = ("completed", "budget-spent")


SECRET_NOISE = "secret"  # the DP noise of a run is keyed by the OS's entropy (dp-noise-source='secure')
SEEDED_NOISE = "seeded: not private"  # … or drawn from the run seed config.json records (dp-noise-source='seeded')


def noise_label(config: dict[str, Any]) -> str | None:
    """What a run's rows and summary say of its DP noise (docs/privacy.md, Secret noise), or None when no DP
    mechanism is on."""
    if value_of(config, "dp") == "off" and not value_of(config, "dp-sgd"):
        return None
    return noise_source_label(value_of(config, "dp-noise-source"))


def noise_source_label(source: str) -> str:
    """The rows' and summary's `dp_noise` for noise drawn from `source` (run-config key dp-noise-source)."""
    return SEEDED_NOISE if source == "seeded" else SECRET_NOISE


def against_initial(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The initial model's test figures (round 0) and whether the last evaluated model is no better: its test loss
    not below the initial one, or its accuracy not above it. A run that blew up and settled back at chance
    can end `completed`; this says so (summary.json `no_better_than_initial` and `warnings`, and the console)."""
    start = next((r for r in rows if r["round"] == 0), {})
    out: dict[str, Any] = {"initial_accuracy": start.get("accuracy"), "initial_loss": start.get("loss")}
    evaluated = [r for r in rows if r["round"] > 0 and (r.get("loss") is not None or r.get("accuracy") is not None)]
    if not evaluated or (start.get("loss") is None and start.get("accuracy") is None):
        return out
    last = evaluated[-1]
    said = []

    def finite(*values) -> bool:
        return all(v is not None and math.isfinite(v) for v in values)

    if finite(last.get("loss"), start.get("loss")) and last["loss"] >= start["loss"]:
        said.append(f"test loss {last['loss']:.4g} vs {start['loss']:.4g}")
    if finite(last.get("accuracy"), start.get("accuracy")) and last["accuracy"] <= start["accuracy"]:
        said.append(f"accuracy {last['accuracy']:.4f} vs {start['accuracy']:.4f}")
    out["no_better_than_initial"] = bool(said)
    if said:
        out["warnings"] = [
            f"the model of round {last['round']} is no better than the initial model ({'; '.join(said)} at round "
            "0): the run learned nothing (a too large lr that blew up the first rounds?)"
        ]
    return out


def lost_participation(trained: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cohorts' replies that did not count (failed or lost clients, rejected replies), with the rounds they
    were lost in; None when no round names its cohort (a run without rounds yet)."""
    rounds = [r for r in trained if r.get("cohort")]
    if not rounds:
        return None
    expected = sum(int(r["cohort"]) for r in rounds)
    valid = sum(int(r.get("replies") or 0) for r in rounds)
    short = [r["round"] for r in rounds if int(r.get("replies") or 0) < int(r["cohort"])]
    return {
        "expected_replies": expected,
        "valid_replies": valid,
        "rejected": sum(int(r.get("rejected") or 0) for r in rounds),
        "failed": sum(int(r.get("failures") or 0) for r in rounds),
        "rounds_with_lost_replies": len(short),
        "first_rounds_with_lost_replies": short[:20],
    }


def closing_line(summary: dict[str, Any], folder: Path) -> str:
    """The one line a run ends with: status, final and best accuracy (or loss), rounds, lost replies, a warning
    when the model is no better than the initial one, and the results folder."""
    parts = [f"run {summary.get('status', 'unknown')}"]
    if summary.get("final_accuracy") is not None:
        best = ""
        if summary.get("best_accuracy") is not None:
            best = f", best {summary['best_accuracy']:.4f} at round {summary['best_round']}"
        parts.append(f"final accuracy {summary['final_accuracy']:.4f}{best}")
    elif summary.get("final_loss") is not None:
        parts.append(f"final loss {summary['final_loss']:.4g}")
    parts.append(f"{summary.get('rounds_completed', 0)}/{summary.get('num_rounds', '?')} rounds")
    lost = summary.get("participation") or {}
    if lost.get("rounds_with_lost_replies"):
        missing = lost["expected_replies"] - lost["valid_replies"]
        parts.append(
            f"{missing} of {lost['expected_replies']} client replies lost in "
            f"{lost['rounds_with_lost_replies']} round(s) (clients.log)"
        )
    if summary.get("no_better_than_initial"):
        parts.append("no better than the initial model")
    parts.append(f"results: {folder}")
    return " │ ".join(parts)


def read_closing_line(folder: Path) -> str:
    """closing_line from the run's summary.json (`results: <folder>` alone when there is none)."""
    try:
        return closing_line(json.loads((folder / "summary.json").read_text()), folder)
    except (OSError, ValueError, TypeError):
        return f"results: {folder}"


def progress_line(row: dict[str, Any], num_rounds: int) -> str:
    parts = [f"round {row['round']:>{len(str(num_rounds))}}/{num_rounds}"]
    if row.get("accuracy") is not None:
        parts.append(f"acc {row['accuracy']:.4f}")
    if row.get("loss") is not None:
        parts.append(f"loss {row['loss']:.4f}")
    if row.get("fed_accuracy") is not None:
        parts.append(f"fed acc {row['fed_accuracy']:.4f} (worst 10% {row['fed_accuracy_worst10']:.4f})")
    elif row.get("fed_loss") is not None:
        parts.append(f"fed loss {row['fed_loss']:.4f}")
    if row.get("relative_error") is not None:
        parts.append(f"rel.err {row['relative_error']:.3e}")
    if row.get("train_loss") is not None:
        parts.append(f"train {row['train_loss']:.4f}")
    if row.get("round_seconds") is not None:
        parts.append(f"{row['round_seconds']:.2f} s")
    if row.get("cohort"):
        bad = (row.get("rejected") or 0) + (row.get("failures") or 0)
        parts.append(f"{row.get('replies', 0)}/{row['cohort']} clients" + (f" ({bad} dropped)" if bad else ""))
    if row.get("bytes_up_per_client"):
        parts.append(f"↓{row['bytes_down_per_client'] / 1e6:.2f} ↑{row['bytes_up_per_client'] / 1e6:.2f} MB/client")
    return "fedsuite │ " + " │ ".join(parts)


def steady_seconds(rows: Iterable[dict[str, Any]], key: str = "round_seconds", skip_last: bool = False) -> float | None:
    """THE steady time per round, used by summary.json, the study reports and the benchmark: the median (mean of the
    middle two for an even count) of `key` over every trained round (round > 0) but the first, which is the cold
    start (imports, data loads, Ray start). `skip_last` also leaves out the last round, for runs that evaluate on the
    test set only there (simulation.benchmarks.overhead). Missing and non-finite values are ignored; None when no
    round is left."""
    trained = [r for r in rows if r["round"] > 0]
    steady = trained[1:-1] if skip_last else trained[1:]
    values = sorted(v for v in (r.get(key) for r in steady) if v is not None and math.isfinite(v))
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])
