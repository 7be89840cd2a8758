"""Files of the DLG leakage study (docs/dlg/index.md): the table (markdown + csv), the plot of
‖X̂ − X‖_F per attack iteration (log y) and the raw per-iteration rows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulation.experiment import report

TABLE_ITERATIONS = (0, 10, 50, 100)


@dataclass
class StudyRow:
    name: str
    reveals: str
    num_examples: int
    steps: int
    lr: float
    errors: list[float]  # index i = after i attack iterations
    distances: list[float]
    true_distance: float  # D at the true batch and labels: 0 for an exact gradient
    note: str = ""  # why it did not run


def checkpoints(iterations: int) -> list[int]:
    return sorted({i for i in TABLE_ITERATIONS if i <= iterations} | {iterations})


def summary(row: StudyRow, iterations: int) -> dict:
    out = {"algorithm": row.name, "reveals": row.reveals, "n_1": row.num_examples, "T": row.steps, "lr": row.lr}
    for i in checkpoints(iterations):
        out[f"err_{i}"] = row.errors[i] if row.errors else None
    first, last = (row.errors[0], row.errors[-1]) if row.errors else (math.nan, math.nan)
    out["relative_change"] = (last - first) / first if row.errors else None
    out["decreased"] = ("yes" if last < first else "no") if math.isfinite(last) else ("diverged" if row.errors else "")
    out["D_true_batch"] = row.true_distance if row.errors else None
    out["D_final"] = row.distances[-1] if row.distances else None
    out["note"] = row.note
    return out


def _fmt(value, column: str = "") -> str:
    if value is None:
        return "–"
    if column == "relative_change":
        return f"{value:+.2e}"
    if isinstance(value, float):
        return f"{value:.6g}" if column.startswith("err_") else f"{value:.4g}"
    return str(value)


def markdown(rows: Sequence[dict], iterations: int) -> str:
    cols = ["algorithm", "reveals", "n_1", "T", *[f"err_{i}" for i in checkpoints(iterations)],
            "relative_change", "decreased", "D_true_batch", "D_final", "note"]  # fmt: skip
    head = ["algorithm", "message", "n_1", "T", *[f"‖X̂−X‖ @{i}" for i in checkpoints(iterations)],
            "(final − initial)/initial", "decreased", "D at true batch", "D final", "note"]  # fmt: skip
    return "\n".join(report.markdown_table(head, ([_fmt(r[c], c) for c in cols] for r in rows))) + "\n"


def plot(path: Path, rows: Sequence[StudyRow], title: str) -> None:
    lines = [report.Line(row.name, [list(enumerate(row.errors))]) for row in rows if row.errors]
    panel = report.Panel(lines, xlabel="attack iteration", ylabel="‖X̂ − X‖_F", yscale="log", title=title,
                         title_size=9, legend_size=10, legend_columns=1, grid=False)  # fmt: skip
    report.plot(path, [panel], figsize=(6.4, 4.2))


def write_all(out: Path, rows: Sequence[StudyRow], iterations: int, title: str, settings_md: str) -> None:
    """table.md, table.csv, errors.png and rows.csv (algorithm, iteration, error, distance) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    table = [summary(r, iterations) for r in rows]
    report.write_csv(out / "table.csv", table)
    (out / "table.md").write_text(f"# DLG leakage study: {title}\n\n{settings_md}\n\n{markdown(table, iterations)}")
    raw = [
        {"algorithm": r.name, "iteration": i, "error": e, "distance": d}
        for r in rows
        for i, (e, d) in enumerate(zip(r.errors, r.distances, strict=True))
    ]
    report.write_csv(out / "rows.csv", raw, ("algorithm", "iteration", "error", "distance"))
    plot(out / "errors.png", rows, title)
