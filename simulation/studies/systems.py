"""The heterogeneous-systems study's report (docs/systems-study/index.md): final accuracy and rounds to a target
against straggler severity and drop-out rate, for each algorithm, from two sweeps run with the same protocol: one over
the speed spread of clients under a round deadline (`deadline-policy='partial'`: a straggler takes the steps that fit)
and one over the drop-out rate. The stragglers sweep's spread 1 is the textbook federation (every client at speed 1
takes all its steps) and the baseline of both. An optional control sweep gives every client the same smaller K on
time, the mean K_i the stragglers manage, to tell less work from unequal work.

    python -m simulation.studies.systems --stragglers docs/systems-study/stragglers \\
        --dropouts docs/systems-study/dropouts --fewer-steps docs/systems-study/fewer-steps --out docs/systems-study

Writes table.md / table.csv (final accuracy, rounds to the target and the mean local steps per condition), loss.md
(each algorithm's paired change from its own baseline), against-fedavg.md (each algorithm minus FedAvg in the same
condition, seed by seed) and accuracy.png. Reads only finished runs; a run that did not finish is counted, never
averaged.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from simulation.experiment import report
from simulation.experiment.report import FINISHED

BASELINE_ALGORITHM = "fedavg"
BASELINE = ("none", 0.0)  # (kind, level): every client at speed 1, nobody drops out
BASELINE_STEPS = 24  # the protocol's K (docs/systems-study/index.md)
ORDER = ["fedavg", "fednova", "scaffold", "feddyn", "fedspeed", "fedcm"]


def condition(config: dict) -> tuple[str, float]:
    """(kind, level) of a run: ('stragglers', speed spread), ('drop-outs', rate), ('fewer steps', K) for a control
    in which every client takes the same smaller K, or the baseline."""
    rate = float(config.get("dropout-rate", 0.0))
    if rate > 0:
        return "drop-outs", rate
    spread = float(config.get("speed-spread", 1.0))
    if spread > 1:
        return "stragglers", spread
    steps = int(config["local-steps"])
    return ("fewer steps", float(steps)) if steps != BASELINE_STEPS else BASELINE


def label(cond: tuple[str, float]) -> str:
    kind, level = cond
    if kind == "stragglers":
        return f"stragglers, spread {level:g}"
    if kind == "drop-outs":
        return f"drop-outs {level:g}"
    if kind == "fewer steps":
        return f"all on time, K = {level:g}"
    return "all on time"


def runs(folder: Path, target: float) -> list[dict]:
    """One record per run under folder/runs: algorithm, condition, seed, status, final accuracy, rounds to
    `target`, the mean K_i the replies took (None where the rows do not say) and the mean share of the cohort that
    replied."""
    out = []
    for summary_file in sorted((folder / "runs").glob("*/*/seed-*/summary.json")):
        run = summary_file.parent
        config = json.loads((run / "config.json").read_text())["run_config"]
        summary = report.read_summary(run)
        rows = [r for r in report.read_rows(run) if r.get("round", 0) > 0]
        steps = [r["steps_mean"] for r in rows if r.get("steps_mean") is not None]
        replied = [r["replies"] / r["cohort"] for r in rows if r.get("cohort")]
        out.append({
            "algorithm": config["algorithm"], "condition": condition(config), "seed": int(config["seed"]),
            "status": summary.get("status"), "accuracy": summary.get("final_accuracy"),
            "rounds": (summary.get("rounds_to_target") or {}).get(f"{target:g}"),
            "steps": sum(steps) / len(steps) if steps else float(config["local-steps"]),
            "replied": sum(replied) / len(replied) if replied else None,
        })  # fmt: skip
    return out


def conditions(records: list[dict]) -> list[tuple[str, float]]:
    kinds = {"none": 0, "fewer steps": 1, "stragglers": 2, "drop-outs": 3}
    return sorted({r["condition"] for r in records}, key=lambda c: (kinds[c[0]], c[1]))


def algorithms(records: list[dict]) -> list[str]:
    names = {r["algorithm"] for r in records}
    return [a for a in ORDER if a in names] + sorted(names - set(ORDER))


def _done(records: list[dict]) -> list[dict]:
    return [r for r in records if r["status"] in FINISHED and r["accuracy"] is not None]


def table(records: list[dict], target: float) -> tuple[list[str], list[dict]]:
    """Per algorithm and condition: final accuracy (mean ± std over seeds), rounds to `target` (mean over the
    seeds that reached it, and how many did), the mean K_i and the share of the cohort that replied."""
    head = ["algorithm", "condition", "final accuracy", f"rounds to {target:.0%}", "mean K_i", "replied"]
    lines, rows = [], []
    for algorithm in algorithms(records):
        for cond in conditions(records):
            every = [r for r in records if r["algorithm"] == algorithm and r["condition"] == cond]
            if not every:
                continue
            done = _done(every)
            accuracy = report.mean_std([r["accuracy"] for r in done])
            reached = [r["rounds"] for r in done if r["rounds"] is not None]
            rounds = report.mean_std(reached)
            steps = report.mean_std([r["steps"] for r in done])
            replied = report.mean_std([r["replied"] for r in done if r["replied"] is not None])
            note = "" if len(done) == len(every) else f" ({len(every) - len(done)} of {len(every)} did not finish)"
            lines.append([
                algorithm, label(cond), report.format_mean_std(accuracy, ".4f") + note,
                f"{report.format_mean_std(rounds, '.1f')} ({len(reached)}/{len(done)})",
                report.fmt(steps and steps[0], ".1f"), report.fmt(replied and replied[0], ".2f"),
            ])  # fmt: skip
            rows.append({
                "algorithm": algorithm, "condition": label(cond),
                "accuracy_mean": accuracy and accuracy[0], "accuracy_std": accuracy and accuracy[1],
                f"rounds_to_{target:g}_mean": rounds and rounds[0], f"reached_{target:g}": len(reached),
                "seeds": len(done), "mean_steps": steps and steps[0], "replied": replied and replied[0],
            })  # fmt: skip
    return report.markdown_table(head, lines), rows


def paired(records: list[dict], key, against) -> list[str]:
    """A table of paired differences (seed by seed) of final accuracy: rows are algorithms, columns conditions;
    `key(r)` picks the record a difference is taken from, `against(r)` the (algorithm, condition) it is taken
    against. Each cell: mean ± std of the differences and the verdict (every seed above: higher; every seed below:
    lower; otherwise: not shown)."""
    by = {(r["algorithm"], r["condition"], r["seed"]): r for r in _done(records)}
    head = ["algorithm"] + [label(c) for c in conditions(records)]
    lines = []
    for algorithm in algorithms(records):
        cells, any_cell = [algorithm], False
        for cond in conditions(records):
            pairs = [(r, by.get((*against(r), r["seed"]))) for r in by.values()
                     if r["algorithm"] == algorithm and r["condition"] == cond and key(r)]  # fmt: skip
            diffs = [r["accuracy"] - o["accuracy"] for r, o in pairs if o is not None and o is not r]
            if not diffs:
                cells.append("–")
                continue
            any_cell = True
            mean, std = report.mean_std(diffs)
            verdict = "higher" if min(diffs) > 0 else "lower" if max(diffs) < 0 else "not shown"
            cells.append(f"{mean:+.4f} ± {std:.4f} ({verdict}, {len(diffs)} seeds)")
        if any_cell:
            lines.append(cells)
    return report.markdown_table(head, lines)


def plot(path: Path, records: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = _done(records)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, kind, xlabel in ((axes[0], "stragglers", "speed spread s (speeds log-uniform on [1/s, 1])"),
                             (axes[1], "drop-outs", "drop-out rate")):  # fmt: skip
        for algorithm in algorithms(records):
            points = defaultdict(list)
            for r in done:
                kind_r, level = r["condition"]
                if r["algorithm"] == algorithm and kind_r in (kind, "none"):
                    points[level if kind_r == kind else (1.0 if kind == "stragglers" else 0.0)].append(r["accuracy"])
            xs = sorted(points)
            ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], marker="o", label=algorithm)
        if kind == "stragglers":
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final test accuracy (mean over seeds)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.studies.systems", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stragglers", type=Path, required=True, help="the sweep folder over speed-spread")
    parser.add_argument("--dropouts", type=Path, required=True, help="the sweep folder over dropout-rate")
    parser.add_argument("--fewer-steps", type=Path, help="a control sweep: every client on time with a smaller K")
    parser.add_argument("--out", type=Path, required=True, help="where the tables and the plot go")
    parser.add_argument("--target", type=float, default=0.8, help="the accuracy whose rounds are counted")
    args = parser.parse_args(argv)
    folders = [("--stragglers", args.stragglers), ("--dropouts", args.dropouts)]
    if args.fewer_steps is not None:
        folders.append(("--fewer-steps", args.fewer_steps))
    for flag, folder in folders:
        if not (folder / "runs").is_dir():
            print(f"{flag} {folder}: no runs/ folder (run the sweeps of docs/systems-study/index.md first)",
                  file=sys.stderr)  # fmt: skip
            return 2
    records = [record for _, folder in folders for record in runs(folder, args.target)]
    args.out.mkdir(parents=True, exist_ok=True)
    lines, rows = table(records, args.target)
    loss = paired(records, key=lambda r: r["condition"] != BASELINE, against=lambda r: (r["algorithm"], BASELINE))
    versus = paired(records, key=lambda r: r["algorithm"] != BASELINE_ALGORITHM,
                    against=lambda r: (BASELINE_ALGORITHM, r["condition"]))  # fmt: skip
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    report.write_csv(args.out / "table.csv", rows)
    (args.out / "loss.md").write_text("\n".join(loss) + "\n")
    (args.out / "against-fedavg.md").write_text("\n".join(versus) + "\n")
    plot(args.out / "accuracy.png", records)
    for block in (lines, loss, versus):
        print("\n".join(block), end="\n\n")
    files = ("table.md", "table.csv", "loss.md", "against-fedavg.md", "accuracy.png")
    print(f"wrote: {', '.join(str(args.out / name) for name in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
