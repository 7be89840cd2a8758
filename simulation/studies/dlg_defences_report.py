"""Files of the DLG-against-defences study (docs/dlg/defences.md): the table (markdown + csv) of the relative
reconstruction error per defence, the plot of DLG's error per attack iteration, the per-iteration rows and a
grid of the attacked record beside its reconstructions."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulation.experiment import report

FILES = ("table.md", "table.csv", "errors.png", "records.png", "rows.csv")


@dataclass
class Attack:
    """One DLG attack of one observed upload."""

    server_round: int
    seed: int
    errors: list[float]  # ‖X' − X‖/‖X‖ before the first iteration (index 0) and after each
    distance: float  # the final matching loss D
    client: float  # final relative error against the attacked client's record
    client_scaled: float  # the same at the best scale of X̂ (the error of the shape alone)
    cohort: float  # the best relative error against any record of the round's cohort
    reconstruction: np.ndarray  # the final X' of the attacked client's first record, flat
    kept: bool = False  # the restart with the smallest D of its upload: the attacker's reconstruction


@dataclass
class DefenceResult:
    name: str
    observes: str
    attacks: list[Attack] = field(default_factory=list)
    closed_form: list[float] = field(default_factory=list)  # per round: the attacker's guess vs client's record
    closed_form_best: list[float] = field(default_factory=list)  # per round: best class row vs any cohort record
    observed_norms: list[float] = field(default_factory=list)  # per round: ‖what the server saw‖
    image_dlg: np.ndarray | None = None  # round 1, the kept restart
    image_closed_form: np.ndarray | None = None  # round 1
    note: str = ""  # why it did not run

    def kept(self) -> list[Attack]:
        return [a for a in self.attacks if a.kept]


def spread(values: Sequence[float]) -> str:
    """median [min, max], or – for none."""
    if not values:
        return "–"
    v = np.asarray(values, np.float64)
    return f"{np.median(v):.3g} [{v.min():.3g}, {v.max():.3g}]"


def summary(r: DefenceResult) -> dict:
    def stats(prefix: str, values: Sequence[float]) -> dict:
        if not values:
            return {f"{prefix}_median": None, f"{prefix}_min": None, f"{prefix}_max": None}
        v = np.asarray(values, np.float64)
        return {
            f"{prefix}_median": float(np.median(v)),
            f"{prefix}_min": float(v.min()),
            f"{prefix}_max": float(v.max()),
        }

    return {
        "defence": r.name,
        "observes": r.observes,
        "uploads": len(r.closed_form),
        "restarts": len(r.attacks),
        **stats("observed_norm", r.observed_norms),
        **stats("dlg_client", [a.client for a in r.kept()]),
        **stats("dlg_client_best_scale", [a.client_scaled for a in r.kept()]),
        **stats("dlg_cohort", [a.cohort for a in r.kept()]),
        **stats("dlg_client_every_restart", [a.client for a in r.attacks]),
        **stats("closed_form_client", r.closed_form),
        **stats("closed_form_cohort", r.closed_form_best),
        **stats("dlg_distance", [a.distance for a in r.kept()]),
        "note": r.note,
    }


def markdown(results: Sequence[DefenceResult]) -> str:
    head = ["defence", "the server observes", "‖observed‖", "DLG: client 1's record", "DLG: at the best scale",
            "DLG: best over cohort", "closed form: client 1's record", "closed form: best over classes and cohort",
            "DLG's final D", "note"]  # fmt: skip
    rows = (
        [
            r.name,
            r.observes,
            spread(r.observed_norms),
            spread([a.client for a in r.kept()]),
            spread([a.client_scaled for a in r.kept()]),
            spread([a.cohort for a in r.kept()]),
            spread(r.closed_form),
            spread(r.closed_form_best),
            spread([a.distance for a in r.kept()]),
            r.note,
        ]
        for r in results
    )
    return "\n".join(report.markdown_table(head, rows)) + "\n"


def plot_errors(path: Path, results: Sequence[DefenceResult]) -> None:
    lines = [report.Line(r.name, [list(enumerate(a.errors)) for a in r.kept()], colour=i)
             for i, r in enumerate(results) if r.attacks]  # fmt: skip
    panel = report.Panel(lines, xlabel="L-BFGS iteration", ylabel="‖X̂ − X‖ / ‖X‖ (client 1's record)",
                         yscale="log", title="DLG per defence, the kept restart: mean over uploads, min–max band",
                         title_size=9, legend_size=8, legend_columns=1, grid=False)  # fmt: skip
    report.plot(path, [panel], figsize=(6.4, 4.2))


def plot_records(path: Path, results: Sequence[DefenceResult], record: np.ndarray, side: int = 28) -> None:
    """The attacked record of round 1 and, per defence, DLG's (seed 0) and the closed form's reconstruction, on
    the record's own grey scale (values outside it saturate)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    shown = [r for r in results if r.image_dlg is not None]
    fig, axes = plt.subplots(2, len(shown) + 1, figsize=(1.1 * (len(shown) + 1), 2.6), squeeze=False)
    scale = {"cmap": "gray", "vmin": float(record.min()), "vmax": float(record.max())}
    columns = [("record", record, None), *((r.name, r.image_dlg, r.image_closed_form) for r in shown)]
    for col, (title, top, bottom) in enumerate(columns):
        axes[0][col].imshow(top.reshape(side, side), interpolation="nearest", **scale)
        axes[0][col].set_title(title, fontsize=6)
        if bottom is not None:
            axes[1][col].imshow(np.nan_to_num(bottom).reshape(side, side), interpolation="nearest", **scale)
        for row in (0, 1):
            axes[row][col].set_xticks([])
            axes[row][col].set_yticks([])
            axes[row][col].spines[:].set_visible(False)
    axes[0][0].set_ylabel("DLG", fontsize=6)
    axes[1][0].set_ylabel("closed form", fontsize=6)
    fig.tight_layout(pad=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100, format="png")
    plt.close(fig)
    Image.open(buffer).convert("L").save(path, optimize=True)  # grey levels only: one byte a pixel


def write_all(out: Path, results: Sequence[DefenceResult], record: np.ndarray, settings_md: str) -> None:
    """table.md, table.csv, errors.png, records.png and rows.csv (the kept restart's error per iteration) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    report.write_csv(out / "table.csv", [summary(r) for r in results])
    title = "# DLG against each privacy defence: ‖X̂ − X‖/‖X‖, median [min, max] over the attacked uploads"
    (out / "table.md").write_text(f"{title}\n\n{settings_md}\n\n{markdown(results)}")
    raw = [
        {"defence": r.name, "round": a.server_round, "seed": a.seed, "iteration": i, "error": f"{e:.6g}"}
        for r in results
        for a in r.kept()
        for i, e in enumerate(a.errors)
    ]
    report.write_csv(out / "rows.csv", raw, ("defence", "round", "seed", "iteration", "error"))
    plot_errors(out / "errors.png", results)
    plot_records(out / "records.png", results, record)
