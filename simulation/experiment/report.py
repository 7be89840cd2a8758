"""What every study reports, in one place: the per-run summary read from a results folder (with its flag for a
run whose last model is no better than its initial one, which every table marks), the one definition of
steady seconds per round, mean ± std and the mean's 95 % interval over seeds (failed or diverged runs counted,
never averaged; simulation/experiment/intervals.py), markdown tables, CSV files and plots (one line per series: the
mean over its seeds with a min–max band, or with the 95 % interval of the mean).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedsuite.results.folder import FINISHED, steady_seconds, write_atomic  # steady_seconds: the one definition
from simulation.experiment.intervals import t_interval

# --- one run ------------------------------------------------------------------------------------------------------


class DamagedRun(ValueError):
    """A results folder whose summary.json or rounds.jsonl cannot be read whole (one line naming the file)."""


def read_summary(folder: Path) -> dict:
    try:
        return json.loads((folder / "summary.json").read_text())
    except ValueError as err:
        raise DamagedRun(f"{folder / 'summary.json'} is damaged ({err}); run it again") from None


def read_run_config(folder: Path) -> dict | None:
    """The run config a results folder ran with (its config.json), or None, with a line on stderr, when there is no
    readable one (nothing then says what the folder ran)."""
    try:
        return json.loads((folder / "config.json").read_text())["run_config"]
    except (OSError, ValueError, KeyError) as err:
        print(f"skipped {folder}: no readable config.json ({err})", file=sys.stderr)
        return None


def read_rows(folder: Path) -> list[dict]:
    """rounds.jsonl, every line whole JSON (a line cut short, e.g. by a full disk or a copy, is DamagedRun)."""
    rows = []
    for number, line in enumerate((folder / "rounds.jsonl").read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            raise DamagedRun(f"{folder / 'rounds.jsonl'} line {number} is not whole JSON; run it again") from None
    return rows


def damage(folder: Path) -> str | None:
    """Why the ended run in `folder` cannot be read whole, in one line, or None when it can: summary.json and
    rounds.jsonl parse, and rounds.jsonl holds every round the summary counts."""
    try:
        summary, rows = read_summary(folder), read_rows(folder)
    except DamagedRun as err:
        return str(err)
    except OSError as err:
        return f"{err.filename or folder} cannot be read ({err.strerror or err}); run it again"
    trained = sum(1 for r in rows if isinstance(r, dict) and isinstance(r.get("round"), int) and r["round"] > 0)
    if trained != summary.get("rounds_completed", trained):
        return (f"{folder / 'rounds.jsonl'} holds {trained} rounds, summary.json counts "
                f"{summary['rounds_completed']}; run it again")  # fmt: skip
    return None


def run_status(folder: Path) -> str:
    """The status a run's summary.json records; `failed` when there is none (the run never got going)."""
    try:
        return read_summary(folder)["status"]
    except (OSError, ValueError, KeyError):
        return "failed"


def run_summary(folder: Path, targets: Sequence[float]) -> dict:
    """A results folder in numbers: status, final/best accuracy and loss, the final federated accuracy and its
    worst-10 % (evaluation federated/both), ‖x − x*‖/‖x*‖ (synthetic federations), rounds to each target and the
    MB one participating client sent and received up to it, steady s/round and client compute s/round,
    communication per client and round, the curve (accuracy per evaluated round, or the relative error where
    there is no accuracy), and whether its last model is no better than the initial one (summary.json
    `no_better_than_initial`: the run learned nothing)."""
    summary, rows = read_summary(folder), read_rows(folder)
    trained = [r for r in rows if r["round"] > 0]
    per_round = max(len(trained), 1)
    accuracy = [(r["round"], r["accuracy"]) for r in rows if r.get("accuracy") is not None]
    if not accuracy:  # evaluation='federated': the clients' weighted accuracy is the run's curve
        accuracy = [(r["round"], r["fed_accuracy"]) for r in rows if r.get("fed_accuracy") is not None]
    error = [(r["round"], r["relative_error"]) for r in rows if r.get("relative_error") is not None]
    rounds_to = {f"{t:g}": summary.get("rounds_to_target", {}).get(f"{t:g}") for t in targets}
    return {
        "status": summary["status"],
        "rounds": summary.get("rounds_completed", len(trained)),
        "final_acc": _first(summary, "final_accuracy", "final_fed_accuracy"),  # federated-only runs: the clients'
        "best_acc": _first(summary, "best_accuracy", "best_fed_accuracy"),
        "final_loss": summary.get("final_loss"),
        "final_rel_err": summary.get("final_relative_error"),
        "final_fed_acc": summary.get("final_fed_accuracy"),
        "final_fed_worst10": summary.get("final_fed_accuracy_worst10"),
        "no_better_than_initial": bool(summary.get("no_better_than_initial")),
        "rounds_to": rounds_to,
        "mb_to": {t: None if n is None else _mb_up_to(trained, n) for t, n in rounds_to.items()},
        "s_per_round": steady_seconds(rows),
        "client_compute_s_per_round": steady_seconds(rows, "client_compute_seconds"),
        "vectors_per_client_round": summary.get("communication_vectors_per_client", 0) / per_round,
        "mb_per_client_round": summary.get("communication_bytes_per_client", 0) / per_round / 1e6,
        "curve": accuracy or error,
        "curve_is_error": not accuracy,
    }


# --- over seeds -----------------------------------------------------------------------------------------------------


def _mb_up_to(trained: list[dict], last: int) -> float:
    """MB one participating client sent and received in rounds 1 … last (down + up, the rows' accounting)."""
    sent = sum((r.get("bytes_down_per_client") or 0) + (r.get("bytes_up_per_client") or 0)
               for r in trained if r["round"] <= last)  # fmt: skip
    return sent / 1e6


def _first(summary: dict, *keys: str):
    """The first of `keys` that summary.json holds a value for, else None."""
    return next((summary[k] for k in keys if summary.get(k) is not None), None)


def mean_std(values: Sequence[float]) -> tuple[float, float] | None:
    """(mean, sample std); std 0 for one value; None for none."""
    if not values:
        return None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, math.sqrt(var)


def format_mean_std(value: tuple[float, float] | None, spec: str) -> str:
    return "–" if value is None else f"{value[0]:{spec}} ± {value[1]:{spec}}"


def spread(values: Sequence[float], spec: str) -> str:
    """mean ± std (sample std), or the one value when there is one."""
    return f"{values[0]:{spec}}" if len(values) == 1 else format_mean_std(mean_std(values), spec)


def over_seeds(runs: Sequence[dict], targets: Sequence[float], metrics: Sequence[str]) -> dict:
    """Run summaries of one setting (one per seed) → mean ± std over the seeds whose run completed: `seeds` is
    "k/n" (completed/all), `no_better_than_initial` how many completed seeds learned nothing, every metric a (mean,
    std) or None, `rounds_to_<t>` (mean ± std over the completed seeds that reached t, how many did, how many
    completed), `intervals` (every metric's, `rounds_to_<t>`'s and `mb_to_<t>`'s mean with its 95 % interval,
    intervals.Interval or None), `by_seed` (the completed runs by their `seed`, for runs that name it: paired
    differences) and the completed seeds' curves. A failed or diverged seed counts in n and is never averaged in."""
    done = [r for r in runs if r.get("status") in FINISHED]  # a budget-spent run ended as its config asked
    row: dict = {"seeds": f"{len(done)}/{len(runs)}",
                 "no_better_than_initial": sum(1 for r in done if r.get("no_better_than_initial"))}  # fmt: skip
    intervals: dict = {}
    for key in metrics:
        values = [r[key] for r in done if r.get(key) is not None]
        row[key], intervals[key] = mean_std(values), t_interval(values)
    for t in targets:
        reached = [r["rounds_to"][f"{t:g}"] for r in done if r["rounds_to"].get(f"{t:g}") is not None]
        row[f"rounds_to_{t:g}"] = (mean_std(reached), len(reached), len(done))
        intervals[f"rounds_to_{t:g}"] = t_interval(reached)
        sent = [r["mb_to"][f"{t:g}"] for r in done if (r.get("mb_to") or {}).get(f"{t:g}") is not None]
        intervals[f"mb_to_{t:g}"] = t_interval(sent)
    row["intervals"] = intervals
    row["by_seed"] = {r["seed"]: r for r in done if "seed" in r}
    row["curves"] = [r["curve"] for r in done]
    return row


# --- files ----------------------------------------------------------------------------------------------------------


def fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


# The last column of a table where some run learned nothing, and the line under the table that says what it means
NO_BETTER = "no better than initial"
NO_BETTER_NOTE = ("no better than initial: the completed runs whose last model is no better than their initial "
                  "one (the test loss not below round 0's, or the accuracy not above it; summary.json "
                  "`no_better_than_initial`): they learned nothing, and count as every completed run "
                  "does.")  # fmt: skip


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def remove_stale(paths: Iterable[Path]) -> None:
    """Remove a study's earlier tables, CSV and plots before it runs: they are rewritten at its end, or (the study
    stopped or failed first) not there at all, never left looking current."""
    for path in paths:
        path.unlink(missing_ok=True)


def write_text(path: Path, data: str | bytes) -> None:
    """A table, CSV file or plot written whole or not at all: a full disk leaves the file as it was and no temporary
    file; the OSError names `path` (not the temporary file)."""
    try:
        write_atomic(path, data)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None


def write_csv(path: Path, rows: Sequence[dict], fields: Sequence[str] | None = None) -> None:
    """One line per row; columns `fields` (default: the first row's keys), other keys left out; written whole."""
    fields = list(fields or (rows[0] if rows else ["algorithm"]))
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, text.getvalue())


@dataclass
class Line:
    """One series: its curves ((x, y) points, one curve per seed) drawn as their mean with a band: `range`, the
    min–max over the curves, or `interval`, the 95 % t interval of the mean (simulation/experiment/intervals.py)."""

    label: str
    curves: list[list[tuple[float, float]]]
    style: str = "-"
    colour: int | str | None = None  # an int picks from the colour cycle
    band: str = "range"


@dataclass
class Panel:
    lines: list[Line]
    xlabel: str = "round"
    ylabel: str = "test accuracy"
    yscale: str = "linear"
    title: str = ""
    title_size: float | None = None
    legend_size: float | None = 8  # None: no legend
    legend_columns: int = 2
    grid: bool = True


def _band(curves: list[list[tuple[float, float]]], band: str = "range") -> tuple[list, list, list, list]:
    """x values every curve has, and the mean over the curves there with the band's low and high: min and max
    (`range`) or the 95 % t interval of the mean (`interval`, two curves or more)."""
    points = [dict(c) for c in curves]
    xs = sorted(set.intersection(*(set(p) for p in points)))
    ys = [[p[x] for p in points] for x in xs]
    if band == "interval" and len(curves) > 1:
        means = [t_interval(v) for v in ys]
        return xs, [m.mean for m in means], [m.low for m in means], [m.high for m in means]
    return xs, [sum(v) / len(v) for v in ys], [min(v) for v in ys], [max(v) for v in ys]


def plot(path: Path, panels: Sequence[Panel], figsize: tuple[float, float] = (8, 5)) -> None:
    """Panels side by side into `path` (PNG, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(panels), figsize=figsize, squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        for line in panel.lines:
            curves = [c for c in line.curves if c]
            if not curves:
                continue
            colour = colours[line.colour % len(colours)] if isinstance(line.colour, int) else line.colour
            xs, mean, low, high = _band(curves, line.band)
            drawn = ax.plot(xs, mean, line.style, color=colour, label=line.label, linewidth=1.4)[0]
            if len(curves) > 1:
                ax.fill_between(xs, low, high, color=drawn.get_color(), alpha=0.2)
        ax.set(xlabel=panel.xlabel, ylabel=panel.ylabel, yscale=panel.yscale)
        if panel.xlabel == "round":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no fractional rounds on a short run
        ax.set_title(panel.title, **({} if panel.title_size is None else {"fontsize": panel.title_size}))
        if panel.grid:
            ax.grid(alpha=0.3)
        if panel.legend_size is not None and ax.get_legend_handles_labels()[0]:  # nothing drawn: no legend
            ax.legend(fontsize=panel.legend_size, ncol=panel.legend_columns)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    write_text(path, png.getvalue())
