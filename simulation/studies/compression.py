"""The compression study's report (docs/compression-study/index.md): what compressing every client upload
(docs/running/compression.md) costs FedAvg, SCAFFOLD, FedDyn, FedSpeed and FAdamGT in accuracy, and what it saves
in megabytes to a target, from one sweep per compressor setting, each over error feedback off and on.

    python -m simulation.studies.compression --study docs/compression-study --out docs/compression-study

Reads every run under <study>/<sweep>/runs/ and keys it by its run config: algorithm, compressor (compress-up with
its k or levels), compress-feedback and seed (simulation/studies/compression_runs.py). Writes table.md / table.csv
(per algorithm and setting: final accuracy with its 95 % interval over seeds, uplink MB per client and round, and
the megabytes one participating client sent up, and up + down, until each target was first reached), paired.md
(each compressed setting minus the same algorithm uncompressed, seed by seed: same partition, same cohorts) and
accuracy-vs-mb.png. A run that did not complete (failed, diverged, damaged, or still running) is counted, never
averaged.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
from pathlib import Path

from simulation.experiment import report
from simulation.experiment.intervals import Interval, t_interval
from simulation.studies.compression_runs import (
    NONE,
    TARGETS,
    Setting,
    done,
    grouped,
    read_study,
    study_dimension,
)

PAIRED_TARGET = 0.75  # the target paired.md compares megabytes at
FILES = ("table.md", "table.csv", "paired.md", "accuracy-vs-mb.png")
FEEDBACK_LABELS = {"none": "off", "ef": "on", "ef21": "EF21"}  # the tables' error-feedback column
LEGEND_FEEDBACK = {"none": "EF off", "ef": "EF on", "ef21": "EF21"}


def feedback_label(setting: Setting, feedback: str) -> str:
    return "–" if setting == NONE else FEEDBACK_LABELS.get(feedback, feedback)


def over_seeds(runs: list[dict], targets=TARGETS) -> dict:
    """One setting's runs (one per seed) in numbers over the completed ones: how many completed of how many, how
    many are still running or learned nothing, the final accuracy's mean with its 95 % interval, the mean MB per
    client and round, and per target how many reached it and the intervals of their uplink and up + down MB to it."""
    finished = done(runs)
    row = {
        "completed": len(finished),
        "runs": len(runs),
        "running": sum(1 for r in runs if r["status"] == "running"),
        "learned_nothing": sum(1 for r in finished if r["no_better_than_initial"]),
        "final_acc": t_interval([r["final_acc"] for r in finished if r["final_acc"] is not None]),
        "up_mb_round": _mean([r["up_mb_round"] for r in finished]),
        "down_mb_round": _mean([r["down_mb_round"] for r in finished]),
    }
    for t in targets:
        reached = [r["to"][t] for r in finished if r["to"][t] is not None]
        row[f"reached_{t:g}"] = len(reached)
        row[f"up_to_{t:g}"] = t_interval([mb for _, mb, _ in reached])
        row[f"total_to_{t:g}"] = t_interval([mb for _, _, mb in reached])
    return row


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def significant(value: float | None, figures: int = 3) -> str:
    """The format spec that shows `value` to `figures` significant figures in fixed point (`.1f` for 38.5, `.4f`
    for 0.0125); the bounds of an interval use their mean's."""
    if not value or not math.isfinite(value):
        return f".{figures - 1}f"
    return f".{max(0, figures - 1 - math.floor(math.log10(abs(value))))}f"


def interval_cell(value: Interval | None, spec: str | None = None, show=lambda v: v) -> str:
    """`15.9 [14.2, 17.6]` (the mean and its 95 % interval), the mean alone for one value, `–` for none; `spec`
    (default: three significant figures of the mean) formats show(v) of each."""
    if value is None:
        return "–"
    spec = spec or significant(show(value.mean))
    if value.half is None:
        return format(show(value.mean), spec)
    return f"{show(value.mean):{spec}} [{show(value.low):{spec}}, {show(value.high):{spec}}]"


def seeds_cell(row: dict) -> str:
    """`2/3`: completed of all; a note for runs still running and for completed runs that learned nothing."""
    notes = [f"{row['running']} running"] if row["running"] else []
    notes += [f"{row['learned_nothing']} learned nothing"] if row["learned_nothing"] else []
    return f"{row['completed']}/{row['runs']}" + (f" ({', '.join(notes)})" if notes else "")


def table(groups: dict, dim: int | None, targets=TARGETS) -> tuple[list[str], list[dict]]:
    """table.md's lines and table.csv's rows: one per algorithm, setting and feedback."""
    head = ["algorithm", "uplink", "error feedback", "seeds", "final accuracy", "uplink MB / round",
            *(f"uplink MB to {t:g}" for t in targets), *(f"up + down MB to {t:g}" for t in targets)]  # fmt: skip
    lines, rows = [], []
    for (algorithm, setting, feedback), runs in groups.items():
        row = over_seeds(runs, targets)
        to = [f"{interval_cell(row[f'{kind}_to_{t:g}'])} ({row[f'reached_{t:g}']}/{row['completed']})"
              for kind in ("up", "total") for t in targets]  # fmt: skip
        lines.append([algorithm, setting.label(dim), feedback_label(setting, feedback), seeds_cell(row),
                      interval_cell(row["final_acc"], ".4f"),
                      "–" if (up := row["up_mb_round"]) is None else format(up, significant(up)), *to])  # fmt: skip
        rows.append(csv_row(algorithm, setting, feedback, dim, row, targets))
    return report.markdown_table(head, lines), rows


def csv_row(algorithm: str, setting: Setting, feedback: str, dim: int | None, row: dict, targets=TARGETS) -> dict:
    """table.csv's row: the setting, its seeds, and each quantity's mean and interval bounds (empty without one)."""
    out = {"algorithm": algorithm, "setting": setting.label(dim), "compress_up": setting.kind,
           "compress_size": setting.size, "feedback": feedback, "completed": row["completed"], "runs": row["runs"],
           "up_mb_per_round": row["up_mb_round"], "down_mb_per_round": row["down_mb_round"]}  # fmt: skip
    keys = [("final_acc", "final_acc")]
    for t in targets:
        out[f"reached_{t:g}"] = row[f"reached_{t:g}"]
        keys += [(f"up_to_{t:g}", f"mb_up_to_{t:g}"), (f"total_to_{t:g}", f"mb_up_down_to_{t:g}")]
    for key, name in keys:
        value = row[key]
        out |= {f"{name}_mean": value and value.mean, f"{name}_ci_low": value and value.low,
                f"{name}_ci_high": value and value.high}  # fmt: skip
    return out


# --- against the same algorithm uncompressed ------------------------------------------------------------------------


def paired(base_runs: list[dict], runs: list[dict], target: float = PAIRED_TARGET) -> dict:
    """Seed by seed against the uncompressed runs, over the seeds both completed (`pairs`): the final accuracy
    differences (compressed − uncompressed), and the ratios compressed / uncompressed of uplink MB and of up + down
    MB to `target` over the pairs where both reached it."""
    base, mine = ({r["seed"]: r for r in done(group)} for group in (base_runs, runs))
    seeds = sorted(base.keys() & mine.keys())
    accuracy = [mine[s]["final_acc"] - base[s]["final_acc"] for s in seeds
                if mine[s]["final_acc"] is not None and base[s]["final_acc"] is not None]  # fmt: skip
    reached = [(mine[s]["to"][target], base[s]["to"][target]) for s in seeds
               if mine[s]["to"][target] is not None and base[s]["to"][target] is not None]  # fmt: skip
    return {
        "pairs": len(seeds),
        "accuracy": accuracy,
        "up": [m[1] / b[1] for m, b in reached if m[1] > 0 and b[1] > 0],
        "total": [m[2] / b[2] for m, b in reached if m[2] > 0 and b[2] > 0],
    }


def agreement(values: list[float], neutral: float, higher_is_better: bool = True) -> str:
    """`better` / `worse` when every seed is on the same side of `neutral`, `not shown` otherwise."""
    if values and all(v > neutral for v in values):
        return "better" if higher_is_better else "worse"
    if values and all(v < neutral for v in values):
        return "worse" if higher_is_better else "better"
    return "not shown"


def difference_cell(diffs: list[float]) -> str:
    """`-0.0123 [-0.0201, -0.0045] (worse, 3 seeds)`: the mean difference, its 95 % interval, the verdict."""
    if not diffs:
        return "–"
    shown = interval_cell(t_interval(diffs), "+.4f")
    return f"{shown} ({agreement(diffs, 0.0)}, {len(diffs)} seed{'' if len(diffs) == 1 else 's'})"


def ratio_cell(ratios: list[float], pairs: int) -> str:
    """`×0.0312 [0.0251, 0.0388] (better, 3/3)`: the geometric mean of the per-seed ratios with its 95 % interval
    (the t interval of their logarithms, exponentiated), the verdict (fewer MB is better) and how many of the pairs
    both reached the target."""
    if not ratios:
        return f"– (0/{pairs})"
    logs = t_interval([math.log(r) for r in ratios])
    shown = interval_cell(logs, show=math.exp)
    return f"×{shown} ({agreement(ratios, 1.0, higher_is_better=False)}, {len(ratios)}/{pairs})"


def paired_table(groups: dict, dim: int | None, target: float = PAIRED_TARGET) -> list[str]:
    """paired.md: one line per algorithm and compressed setting that has the same algorithm uncompressed."""
    head = ["algorithm", "uplink", "error feedback", "pairs", "Δ final accuracy",
            f"uplink MB to {target:g}, ratio", f"up + down MB to {target:g}, ratio"]  # fmt: skip
    lines = []
    for (algorithm, setting, feedback), runs in groups.items():
        base = groups.get((algorithm, NONE, "none"))
        if setting == NONE or base is None:
            continue
        p = paired(base, runs, target)
        lines.append([algorithm, setting.label(dim), feedback_label(setting, feedback), str(p["pairs"]),
                      difference_cell(p["accuracy"]), ratio_cell(p["up"], p["pairs"]),
                      ratio_cell(p["total"], p["pairs"])])  # fmt: skip
    return report.markdown_table(head, lines)


# --- the plot -------------------------------------------------------------------------------------------------------


def mean_curve(runs: list[dict]) -> list[tuple[float, float]]:
    """(mean cumulative uplink MB, mean test accuracy) over the completed seeds, at each evaluated round they all
    have."""
    curves = [{n: (mb, acc) for n, mb, acc in r["curve"]} for r in done(runs)]
    if not curves:
        return []
    rounds = sorted(set.intersection(*(set(c) for c in curves)))
    points = [(_mean([c[n][0] for c in curves]), _mean([c[n][1] for c in curves])) for n in rounds]
    return [(x, y) for x, y in points if x > 0]  # a log axis: no round that sent nothing


def same_limits(panels: list) -> None:
    """One x and one y range for every panel, the union of the panels that drew a line: the algorithms compare by
    eye."""
    drawn = [ax for ax in panels if ax.lines]
    if not drawn:
        return
    xs, ys = [ax.get_xlim() for ax in drawn], [ax.get_ylim() for ax in drawn]
    for ax in panels:
        ax.set_xlim(min(low for low, _ in xs), max(high for _, high in xs))
        ax.set_ylim(min(low for low, _ in ys), max(high for _, high in ys))


def plot(path: Path, groups: dict, dim: int | None) -> None:
    """One panel per algorithm: mean test accuracy against cumulative uplink MB per participating client (log x),
    one line per setting (error feedback on solid, off dashed, EF21 dotted), uncompressed in black; the legend in
    a panel of its own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algorithms = list(dict.fromkeys(a for a, _, _ in groups))
    settings = sorted({s for _, s, _ in groups if s != NONE}, key=lambda s: s.order)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rows = math.ceil((len(algorithms) + 1) / 3)
    fig, axes = plt.subplots(rows, 3, figsize=(15, 4.2 * rows), squeeze=False)
    legend: dict[str, object] = {}
    for ax, algorithm in zip(axes.flat, algorithms, strict=False):
        for (name, setting, feedback), runs in groups.items():
            points = mean_curve(runs) if name == algorithm else []
            if not points:
                continue
            colour = "black" if setting == NONE else colours[settings.index(setting) % len(colours)]
            style = {"none": "--", "ef": "-"}.get(feedback, ":") if setting != NONE else "-"
            label = setting.label(dim) + ("" if setting == NONE else f", {LEGEND_FEEDBACK.get(feedback, feedback)}")
            xs, ys = zip(*points, strict=True)
            legend.setdefault(label, ax.plot(xs, ys, style, color=colour, linewidth=1.3, label=label)[0])
        ax.set(xscale="log", title=algorithm, xlabel="cumulative uplink MB per participating client",
               ylabel="test accuracy (mean over seeds)")  # fmt: skip
        ax.grid(alpha=0.3, which="both")
    panels, spare = list(axes.flat)[: len(algorithms)], list(axes.flat)[len(algorithms) :]
    same_limits(panels)
    for ax in spare:
        ax.axis("off")
    spare[0].legend(list(legend.values()), list(legend), loc="center", fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    report.write_text(path, png.getvalue())


# --- the command ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.studies.compression",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--study", type=Path, required=True, help="the study folder, one sweep per setting in it")
    parser.add_argument("--out", type=Path, required=True, help="where the tables and the plot go")
    args = parser.parse_args(argv)
    records = read_study(args.study)
    if not records:
        print(f"--study {args.study}: no runs in <study>/<sweep>/runs/ (run the sweeps of "
              "docs/compression-study/index.md first)", file=sys.stderr)  # fmt: skip
        return 2
    groups, dim = grouped(records), study_dimension(records)
    lines, rows = table(groups, dim)
    pairs = paired_table(groups, dim)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_text(args.out / "table.md", "\n".join(lines) + "\n")
    report.write_csv(args.out / "table.csv", rows)
    report.write_text(args.out / "paired.md", "\n".join(pairs) + "\n")
    plot(args.out / "accuracy-vs-mb.png", groups, dim)
    print("\n".join(lines), "", "\n".join(pairs), sep="\n")
    print(f"wrote: {', '.join(str(args.out / name) for name in FILES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
