"""accuracy.png of a results folder (docs/reference/results-folder.md#accuracypng): the accuracy curves, the
relative error of the synthetic federations, the clients' accuracies, and what the system models did each round.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from fedsuite.results.writing import write_atomic

SYSTEM_COLUMNS = ("steps_mean", "dropped", "late", "unavailable")  # the system models' row columns


def _plot_systems(ax, rows: list[dict[str, Any]]) -> None:
    """What the system models did each round (docs/running/systems.md): the replies' K_i (mean, min–max band) and,
    on a second axis, the clients dropped, late and unavailable."""
    trained = [r for r in rows if r["round"] > 0]
    steps = [r for r in trained if r.get("steps_mean") is not None]
    if steps:
        t = [r["round"] for r in steps]
        ax.plot(t, [r["steps_mean"] for r in steps], color="C0", label="mean K_i")
        ax.fill_between(t, [r["steps_min"] for r in steps], [r["steps_max"] for r in steps], color="C0", alpha=0.2)
        ax.set_ylabel("local steps K_i (min–max band)")
    counts = [key for key in ("dropped", "late", "unavailable") if any(key in r for r in trained)]
    if counts:
        other = ax.twinx() if steps else ax
        for n, key in enumerate(counts, 1):
            counted = [r.get(key, 0) for r in trained]
            other.step([r["round"] for r in trained], counted, where="mid", color=f"C{n}", label=key)
        other.set_ylabel("clients")
        other.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("round")


def draw_plot(folder: Path, rows: list[dict[str, Any]]) -> None:
    """accuracy.png of `folder` from its rows (docs/reference/results-folder.md#accuracypng)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    acc = [(r["round"], r["accuracy"]) for r in rows if r.get("accuracy") is not None]
    fed = [(r["round"], r["fed_accuracy"]) for r in rows if r.get("fed_accuracy") is not None]
    err = [(r["round"], r["relative_error"]) for r in rows if r.get("relative_error") is not None]
    clients = next((r for r in reversed(rows) if r.get("fed_client_accuracy")), None)
    curves = [(points, label) for points, label in ((acc, "central test"), (fed, "federated")) if points]
    systems = any(k in r for r in rows for k in SYSTEM_COLUMNS)
    shown = (("accuracy", curves), ("error", err), ("clients", clients), ("systems", systems))
    panels = [kind for kind, have in shown if have]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, kind in zip(axes[0], panels, strict=True):
        if kind == "accuracy":
            for points, label in curves:
                ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
            ax.set(xlabel="round", ylabel="accuracy")
            if len(curves) > 1 or fed:
                ax.legend()
        elif kind == "error":
            ax.plot(*zip(*err, strict=True), marker="o", markersize=3)
            ax.set(xlabel="round", ylabel="‖x − x*‖ / ‖x*‖", yscale="log")
        elif kind == "clients":
            ax.hist(list(clients["fed_client_accuracy"].values()), bins=10, range=(0.0, 1.0))
            ax.set(xlabel=f"client accuracy (round {clients['round']})", ylabel="clients")
        else:
            _plot_systems(ax, rows)
        if kind != "clients":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        ax.grid(alpha=0.3)
    fig.suptitle(folder.name, fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    write_atomic(folder / "accuracy.png", png.getvalue())


def draw_missing_plot(folder: Path) -> bool:
    """Draw accuracy.png from rounds.jsonl when a run ended without it (a signal that arrived while the run wrote
    its end); True if it was drawn."""
    if (folder / "accuracy.png").exists() or not (folder / "rounds.jsonl").is_file():
        return False
    rows = []
    for line in (folder / "rounds.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    draw_plot(folder, rows)
    return True
