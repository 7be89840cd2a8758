"""A run's folder: config.json, rounds.jsonl + rounds.csv (one row per round, flushed as it happens),
summary.json (rewritten every round, status 'running' until the last), accuracy.png, and a progress line."""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

CSV_COLUMNS = (
    "round", "accuracy", "loss", "train_loss", "objective_gap", "relative_error", "round_seconds",
    "elapsed_seconds", "client_compute_seconds", "client_compute_max_seconds", "cohort", "replies",
    "rejected", "failures", "bytes_down_per_client", "bytes_up_per_client", "vectors_down_per_client",
    "vectors_up_per_client", "lr",
)  # fmt: skip

log = logging.getLogger("flwr.fedsuite")


class RunRecorder:
    def __init__(
        self, folder: Path, config: dict[str, Any], meta: dict[str, Any], targets: list[float], num_rounds: int
    ):
        self.folder = folder
        self.targets = targets
        self.num_rounds = num_rounds
        self.rows: list[dict[str, Any]] = []
        self.started = time.time()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"run_config": config, **meta}, indent=2, default=str))
        for name in ("rounds.jsonl", "rounds.csv"):
            (folder / name).unlink(missing_ok=True)
        with open(folder / "rounds.csv", "w", newline="") as f:
            csv.writer(f).writerow(CSV_COLUMNS)
        self.write_summary("running")

    def record(self, row: dict[str, Any]) -> None:
        row = {"elapsed_seconds": round(time.time() - self.started, 3), **row}
        self.rows.append(row)
        with open(self.folder / "rounds.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        with open(self.folder / "rounds.csv", "a", newline="") as f:
            csv.writer(f).writerow(["" if row.get(c) is None else row.get(c) for c in CSV_COLUMNS])
        log.info(progress_line(row, self.num_rounds))
        last = row["round"] >= self.num_rounds
        self.write_summary("completed" if last else "running")
        if last:
            self.plot()

    def summary(self, status: str) -> dict[str, Any]:
        evaluated = [r for r in self.rows if r.get("accuracy") is not None and r["round"] > 0]
        trained = [r for r in self.rows if r["round"] > 0]
        best = max(evaluated, key=lambda r: r["accuracy"], default=None)
        out: dict[str, Any] = {
            "status": status,
            "rounds_completed": len(trained),
            "num_rounds": self.num_rounds,
            "final_accuracy": evaluated[-1]["accuracy"] if evaluated else None,
            "best_accuracy": best["accuracy"] if best else None,
            "best_round": best["round"] if best else None,
            "final_loss": evaluated[-1]["loss"] if evaluated else None,
            "rounds_to_target": {
                f"{t:g}": next((r["round"] for r in evaluated if r["accuracy"] >= t), None) for t in self.targets
            },
            "total_seconds": round(time.time() - self.started, 3),
            "first_round_seconds": trained[0]["round_seconds"] if trained else None,
            "steady_round_seconds": _median([r["round_seconds"] for r in trained[1:]]),
            "communication_bytes_per_client": sum(
                (r.get("bytes_down_per_client") or 0) + (r.get("bytes_up_per_client") or 0) for r in trained
            ),
            "communication_vectors_per_client": sum(
                (r.get("vectors_down_per_client") or 0) + (r.get("vectors_up_per_client") or 0) for r in trained
            ),
        }
        with_error = [r for r in self.rows if r.get("relative_error") is not None]
        if with_error:
            out["final_relative_error"] = with_error[-1]["relative_error"]
            out["final_objective_gap"] = with_error[-1]["objective_gap"]
        return out

    def write_summary(self, status: str) -> None:
        tmp = self.folder / "summary.json.tmp"
        tmp.write_text(json.dumps(self.summary(status), indent=2))
        tmp.replace(self.folder / "summary.json")

    def plot(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        acc = [(r["round"], r["accuracy"]) for r in self.rows if r.get("accuracy") is not None]
        err = [(r["round"], r["relative_error"]) for r in self.rows if r.get("relative_error") is not None]
        panels = [
            (p, label, scale)
            for p, label, scale in ((acc, "test accuracy", "linear"), (err, "‖x − x*‖ / ‖x*‖", "log"))
            if p
        ]
        if not panels:
            return
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
        for ax, (points, label, scale) in zip(axes[0], panels, strict=True):
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3)
            ax.set(xlabel="round", ylabel=label, yscale=scale)
            ax.grid(alpha=0.3)
        fig.suptitle(self.folder.name, fontsize=9)
        fig.tight_layout()
        fig.savefig(self.folder / "accuracy.png", dpi=110)
        plt.close(fig)


def progress_line(row: dict[str, Any], num_rounds: int) -> str:
    parts = [f"round {row['round']:>{len(str(num_rounds))}}/{num_rounds}"]
    if row.get("accuracy") is not None:
        parts.append(f"acc {row['accuracy']:.4f}")
    if row.get("loss") is not None:
        parts.append(f"loss {row['loss']:.4f}")
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


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None and math.isfinite(v))
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])
