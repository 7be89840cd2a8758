"""The precision study's report (docs/precision-study/index.md): what bfloat16 autocast of the local training forward
pass (`autocast='bf16'`) does to accuracy when the clients of a round train as one stacked computation
(`batch-clients=true`), and whether batched float32 training reproduces one-at-a-time training.

    python -m simulation.studies.precision --study docs/precision-study --reference docs/cpu-study \\
        --out docs/precision-study

Reads every run under <study>/runs/ and <study>/<sweep>/runs/, and, with --reference, the one-at-a-time runs of
another study (docs/cpu-study: the same protocol, run earlier with other software). Each run is keyed by its run
config: algorithm, `batch-clients`, `autocast` and seed, and by the study it came from. Writes

- table.md / table.csv: per algorithm and setting, final and best accuracy (mean with its 95 % interval over the
  seeds), rounds to each target over the seeds that reached it (k/n), and the seconds of client training per round;
- paired.md / paired.csv: seed by seed (same partition, same cohorts, same initial model), bf16 − fp32 with
  batching, batched − one-at-a-time in float32, and batched − the reference's runs: the mean difference of final and
  best accuracy and of rounds to each target with its 95 % interval, the largest |difference| of test accuracy over
  every evaluated round of every pair, and the ratio of client training seconds per round;
- accuracy.png: test accuracy per round, one panel per algorithm, mean over seeds with its 95 % interval;
- difference.png: per algorithm, bf16 − fp32 and batched − one at a time in test accuracy per round, the mean over
  the seeds of the per-seed difference with its 95 % interval.

Only runs that completed are averaged; the others are counted. Two runs are paired only when their run configs
agree on every key both hold, apart from those that choose how a run is computed or where it is written (NOT_PROTOCOL).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from fedsuite.registry.known import BUILT_IN_SCHEMA
from simulation.experiment import intervals, report
from simulation.experiment.intervals import Interval, t_interval
from simulation.experiment.report import FINISHED
from simulation.studies.precision_gradients import gradient_check, gradient_lines

TARGETS = (0.75, 0.8)
ORDER = ("fedavg", "scaffold", "feddyn", "fedspeed")  # algorithms first in this order, then by name
FILES = ("table.md", "table.csv", "paired.md", "paired.csv", "accuracy.png", "difference.png")
# run-config keys that choose how a run is computed or where it goes, not what it computes
NOT_PROTOCOL = frozenset({"out-dir", "batch-clients", "batch-messages", "autocast", "channels-last", "cuda-graphs",
                          "client-threads", "reuse-host-memory", "checkpoint-every", "tensorboard", "wandb-mode",
                          "wandb-project", "resume-from", "device"})  # fmt: skip
STUDY, REFERENCE = "study", "reference"


def precision_label(autocast: str) -> str:
    return "fp32" if autocast == "none" else autocast


def setting_label(setting: tuple[str, bool, str]) -> str:
    """`batched, bf16`, `one at a time, fp32`, `one at a time, fp32 (reference)`."""
    source, batched, autocast = setting
    text = f"{'batched' if batched else 'one at a time'}, {precision_label(autocast)}"
    return text if source == STUDY else f"{text} ({source})"


def read_run(folder: Path, source: str, targets=TARGETS) -> dict | None:
    """One run's record: algorithm, seed, setting (source, batched, autocast), status, its run config, and
    report.run_summary's numbers when it completed (a run whose files cannot be read whole counts as `damaged`).
    None, with a line on stderr, for a folder without a readable config.json."""
    config = report.read_run_config(folder)
    if config is None:
        return None
    record = {
        "algorithm": str(config["algorithm"]),
        "seed": int(config["seed"]),
        "setting": (source, bool(config.get("batch-clients", False)), str(config.get("autocast", "none"))),
        "status": report.run_status(folder),
        "config": config,
        "folder": folder,
    }
    if record["status"] in FINISHED:
        try:
            record |= report.run_summary(folder, targets)
        except report.DamagedRun as err:
            print(f"counted as not completed: {err}", file=sys.stderr)
            record["status"] = "damaged"
    return record


def read_runs(root: Path, source: str, targets=TARGETS, keep=lambda record: True) -> list[dict]:
    """Every run under root/runs/… and root/<sweep>/runs/… that `keep` accepts; a second folder with the same key
    (setting, algorithm, seed) is named on stderr and skipped."""
    folders = sorted({*root.glob("runs/*/*/seed-*"), *root.glob("*/runs/*/*/seed-*")})
    kept: dict[tuple, dict] = {}
    for folder in folders:
        record = read_run(folder, source, targets) if folder.is_dir() else None
        if record is None or not keep(record):
            continue
        key = (record["setting"], record["algorithm"], record["seed"])
        if key in kept:
            print(f"skipped {folder}: the same run as {kept[key]['folder']}", file=sys.stderr)
            continue
        kept[key] = record
    return list(kept.values())


def grouped(records: list[dict]) -> dict[tuple[str, tuple], list[dict]]:
    """The records by (algorithm, setting): algorithms in ORDER, then batched fp32, batched bf16, one at a time,
    the reference; seeds in order."""

    def order(r: dict) -> tuple:
        source, batched, autocast = r["setting"]
        algorithm = r["algorithm"]
        return (ORDER.index(algorithm) if algorithm in ORDER else len(ORDER), algorithm, source != STUDY,
                not batched, autocast != "none", autocast, r["seed"])  # fmt: skip

    groups: dict[tuple[str, tuple], list[dict]] = {}
    for r in sorted(records, key=order):
        groups.setdefault((r["algorithm"], r["setting"]), []).append(r)
    return groups


def done(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r["status"] in FINISHED]


def compute_seconds(run: dict) -> float | None:
    """Seconds of client training per round (all the round's clients), steady rounds; None where not recorded."""
    return run.get("client_compute_s_per_round")


# --- the tables -----------------------------------------------------------------------------------------------------


def over_seeds(runs: list[dict], targets=TARGETS) -> dict:
    finished = done(runs)
    row = {
        "completed": len(finished),
        "runs": len(runs),
        "final_acc": t_interval([r["final_acc"] for r in finished if r.get("final_acc") is not None]),
        "best_acc": t_interval([r["best_acc"] for r in finished if r.get("best_acc") is not None]),
        "compute_s": t_interval([s for r in finished if (s := compute_seconds(r)) is not None]),
    }
    for t in targets:
        reached = [n for r in finished if (n := r["rounds_to"].get(f"{t:g}")) is not None]
        row[f"rounds_to_{t:g}"], row[f"reached_{t:g}"] = t_interval(reached), len(reached)
    return row


def cell(value: Interval | None, spec: str) -> str:
    """`0.8110 [0.7995, 0.8225]`, the value alone for one seed, `–` for none."""
    if value is None:
        return "–"
    if value.half is None:
        return format(value.mean, spec)
    return f"{value.mean:{spec}} [{value.low:{spec}}, {value.high:{spec}}]"


def table(groups: dict, targets=TARGETS) -> tuple[list[str], list[dict]]:
    """table.md's lines and table.csv's rows: one per algorithm and setting."""
    head = ["algorithm", "setting", "seeds", "final accuracy", "best accuracy",
            *(f"rounds to {t:g}" for t in targets), "client training s / round"]  # fmt: skip
    lines, rows = [], []
    for (algorithm, setting), runs in groups.items():
        row = over_seeds(runs, targets)
        to = [f"{cell(row[f'rounds_to_{t:g}'], '.1f')} ({row[f'reached_{t:g}']}/{row['completed']})" for t in targets]
        lines.append([algorithm, setting_label(setting), f"{row['completed']}/{row['runs']}",
                      cell(row["final_acc"], ".4f"), cell(row["best_acc"], ".4f"), *to,
                      cell(row["compute_s"], ".3f")])  # fmt: skip
        out = {"algorithm": algorithm, "setting": setting_label(setting), "batched": setting[1],
               "autocast": setting[2], "source": setting[0], "completed": row["completed"],
               "runs": row["runs"]}  # fmt: skip
        for key in ("final_acc", "best_acc", "compute_s", *(f"rounds_to_{t:g}" for t in targets)):
            value = row[key]
            out |= {f"{key}_mean": value and value.mean, f"{key}_ci_low": value and value.low,
                    f"{key}_ci_high": value and value.high}  # fmt: skip
        out |= {f"reached_{t:g}": row[f"reached_{t:g}"] for t in targets}
        rows.append(out)
    return report.markdown_table(head, lines), rows


def protocol_differences(a: dict, b: dict) -> list[str]:
    """The run-config keys outside NOT_PROTOCOL on which the two differ. A key one run lacks (a run made before the
    key existed) counts at the key's default; a key that is not a built-in one must be held by both alike."""
    missing = object()

    def value(config: dict, key: str):
        if key in config:
            return config[key]
        return BUILT_IN_SCHEMA[key].default if key in BUILT_IN_SCHEMA else missing

    return sorted(k for k in a.keys() | b.keys() if k not in NOT_PROTOCOL and value(a, k) != value(b, k))


def same_protocol_as(records: list[dict]):
    """A filter for another study's runs: one-at-a-time float32 runs of an algorithm and seed the study ran, with
    the protocol of one of the study's runs of that algorithm and seed (the other study's other sweeps, e.g. with
    another relaxed-init, are not read)."""
    study = {}
    for r in records:
        study.setdefault((r["algorithm"], r["seed"]), []).append(r["config"])

    def keep(record: dict) -> bool:
        _, batched, autocast = record["setting"]
        configs = study.get((record["algorithm"], record["seed"]), [])
        return (not batched and autocast == "none"
                and any(not protocol_differences(record["config"], c) for c in configs))  # fmt: skip

    return keep


def largest_gap(a: dict, b: dict) -> float | None:
    """The largest |accuracy difference| over the rounds both evaluated; None where they share none."""
    mine, theirs = dict(a["curve"]), dict(b["curve"])
    rounds = mine.keys() & theirs.keys()
    return max(abs(mine[n] - theirs[n]) for n in rounds) if rounds else None


def compare(runs: list[dict], base: list[dict], targets=TARGETS) -> dict:
    """`runs` − `base`, seed by seed over the seeds both completed with the same protocol: the pairs, the seeds left
    out for a differing protocol (with the keys), the paired differences (intervals.Interval or None), the largest
    |accuracy difference| over every evaluated round of every pair, and the geometric mean of the per-seed ratios of
    client training seconds with its 95 % interval (the t interval of their logarithms)."""
    mine, theirs = {r["seed"]: r for r in done(runs)}, {r["seed"]: r for r in done(base)}
    seeds, differing = [], {}
    for s in sorted(mine.keys() & theirs.keys()):
        keys = protocol_differences(mine[s]["config"], theirs[s]["config"])
        if keys:
            differing[s] = keys
        else:
            seeds.append(s)

    def diff(key: str) -> Interval | None:
        def value(run: dict):
            return run["rounds_to"].get(key.removeprefix("rounds_to_")) if key.startswith("rounds_to_") else run[key]

        return intervals.paired({s: value(theirs[s]) for s in seeds}, {s: value(mine[s]) for s in seeds})

    gaps = [g for s in seeds if (g := largest_gap(mine[s], theirs[s])) is not None]
    logs = [math.log(a / b) for s in seeds
            if (a := compute_seconds(mine[s])) and (b := compute_seconds(theirs[s]))]  # fmt: skip
    ratio = t_interval(logs)
    return {
        "pairs": len(seeds),
        "differing": differing,
        **{k: diff(k) for k in ("final_acc", "best_acc", *(f"rounds_to_{t:g}" for t in targets))},
        "largest_gap": max(gaps) if gaps else None,
        "compute_ratio": ratio and Interval(math.exp(ratio.mean), ratio.half, ratio.n),
    }


def comparisons(groups: dict) -> list[tuple[str, str, tuple, tuple]]:
    """(algorithm, what, setting, base setting) for every comparison the runs allow: batched bf16 − batched fp32,
    batched fp32 − one at a time fp32, batched fp32 − the reference's one at a time fp32."""
    batched32, batched16, single32 = (STUDY, True, "none"), (STUDY, True, "bf16"), (STUDY, False, "none")
    algorithms = list(dict.fromkeys(a for a, _ in groups))
    out = []
    for a in algorithms:
        settings = {s for b, s in groups if b == a}
        if batched32 in settings and batched16 in settings:
            out.append((a, "bf16 − fp32, batched", batched16, batched32))
        if batched32 in settings and single32 in settings:
            out.append((a, "batched − one at a time, fp32", batched32, single32))
        for reference in sorted(s for s in settings if s[0] != STUDY and not s[1] and s[2] == "none"):
            if batched32 in settings:
                out.append((a, f"batched − one at a time ({reference[0]}), fp32", batched32, reference))
    return out


def ratio_cell(value: Interval | None) -> str:
    if value is None:
        return "–"
    if value.half is None:
        return f"×{value.mean:.2f}"
    low, high = math.exp(math.log(value.mean) - value.half), math.exp(math.log(value.mean) + value.half)
    return f"×{value.mean:.2f} [{low:.2f}, {high:.2f}]"


def paired_table(groups: dict, targets=TARGETS) -> tuple[list[str], list[dict]]:
    """paired.md's lines (the table and a line per seed left out for a differing protocol) and paired.csv's rows."""
    head = ["algorithm", "comparison", "pairs", "Δ final accuracy", "Δ best accuracy",
            *(f"Δ rounds to {t:g}" for t in targets), "largest accuracy gap in a round",
            "client training s, ratio"]  # fmt: skip
    lines, rows, notes = [], [], []
    for algorithm, what, setting, base in comparisons(groups):
        c = compare(groups[(algorithm, setting)], groups[(algorithm, base)], targets)
        if setting[0] != base[0]:
            c["compute_ratio"] = None  # seconds measured in another study, on another day's machine load
        to = []
        for t in targets:
            d = c[f"rounds_to_{t:g}"]
            value = intervals.format_difference(d, ".1f", higher_is_better=False) if d is not None else ""
            to.append("–" if d is None else f"{value} ({d.n}/{c['pairs']})")
        gap = c["largest_gap"]
        lines.append([algorithm, what, str(c["pairs"]), intervals.format_difference(c["final_acc"], ".4f"),
                      intervals.format_difference(c["best_acc"], ".4f"), *to,
                      "–" if gap is None else f"{gap:.4f}", ratio_cell(c["compute_ratio"])])  # fmt: skip
        notes += [f"- {algorithm}, {what}: seed {s} left out, the runs differ in {', '.join(keys)}"
                  for s, keys in c["differing"].items()]  # fmt: skip
        out = {"algorithm": algorithm, "comparison": what, "setting": setting_label(setting),
               "base": setting_label(base), "pairs": c["pairs"], "largest_gap": gap}  # fmt: skip
        for key in ("final_acc", "best_acc", *(f"rounds_to_{t:g}" for t in targets)):
            d = c[key]
            out |= {f"{key}_diff_mean": d and d.mean, f"{key}_diff_ci_low": d and d.low,
                    f"{key}_diff_ci_high": d and d.high, f"{key}_pairs": 0 if d is None else d.n}  # fmt: skip
        ratio = c["compute_ratio"]
        out["compute_ratio"] = ratio and ratio.mean
        rows.append(out)
    return report.markdown_table(head, lines) + ([""] + notes if notes else []), rows


def plot(path: Path, groups: dict) -> None:
    algorithms = list(dict.fromkeys(a for a, _ in groups))
    styles = {(STUDY, True, "none"): ("-", 0), (STUDY, True, "bf16"): ("--", 1), (STUDY, False, "none"): (":", 2)}
    panels = []
    for a in algorithms:
        lines = []
        for (b, setting), runs in groups.items():
            if b != a:
                continue
            style, colour = styles.get(setting, ("-.", 3))
            curves = [[(n, acc) for n, acc in r["curve"] if n > 0] for r in done(runs)]
            lines.append(report.Line(setting_label(setting), curves, style, colour, band="interval"))
        panels.append(report.Panel(lines, title=a, legend_size=7, legend_columns=1))
    if panels:
        report.plot(path, panels, figsize=(4 * len(panels), 4))


def difference_curves(runs: list[dict], base: list[dict]) -> list[list[tuple[int, float]]]:
    """Per seed both completed with the same protocol, the accuracy of `runs` minus that of `base` at every round
    both evaluated (after round 0)."""
    mine, theirs = {r["seed"]: r for r in done(runs)}, {r["seed"]: r for r in done(base)}
    curves = []
    for s in sorted(mine.keys() & theirs.keys()):
        if protocol_differences(mine[s]["config"], theirs[s]["config"]):
            continue
        a, b = dict(mine[s]["curve"]), dict(theirs[s]["curve"])
        curves.append([(n, a[n] - b[n]) for n in sorted(a.keys() & b.keys()) if n > 0])
    return curves


def plot_differences(path: Path, groups: dict) -> None:
    """difference.png: one panel per algorithm, each comparison within the study (bf16 − fp32 batched, batched −
    one at a time) as the mean over seeds of the per-seed accuracy difference per round, with its 95 % interval."""
    panels = []
    for algorithm in dict.fromkeys(a for a, _ in groups):
        within = [c for c in comparisons(groups) if c[0] == algorithm and c[3][0] == STUDY]
        lines = [report.Line(what, difference_curves(groups[(a, setting)], groups[(a, base)]), "-", colour,
                             band="interval")
                 for colour, (a, what, setting, base) in enumerate(within)]  # fmt: skip
        if lines:
            panels.append(report.Panel(lines, ylabel="test accuracy difference", title=algorithm, legend_size=7,
                                       legend_columns=1))  # fmt: skip
    if panels:
        report.plot(path, panels, figsize=(4 * len(panels), 4))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.studies.precision",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--study", type=Path, help="the study folder (its sweeps' runs)")
    parser.add_argument("--reference", type=Path, action="append", default=[],
                        help="another study's folder, its one-at-a-time fp32 runs to compare")  # fmt: skip
    parser.add_argument("--out", type=Path, help="where the tables and the plot go")
    parser.add_argument("--gradients", action="store_true",
                        help="print the gradient check (gradient_check) instead, and write nothing")  # fmt: skip
    args = parser.parse_args(argv)
    if args.gradients:
        print("\n".join(gradient_lines(gradient_check())))
        return 0
    if args.study is None or args.out is None:
        parser.error("give --study and --out (or --gradients)")
    records = read_runs(args.study, STUDY)
    if not records:
        print(f"--study {args.study}: no runs under <study>/runs/ or <study>/<sweep>/runs/", file=sys.stderr)
        return 2
    for folder in args.reference:
        records += read_runs(folder, folder.name, keep=same_protocol_as(records))
    groups = grouped(records)
    lines, rows = table(groups)
    pairs, pair_rows = paired_table(groups)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_text(args.out / "table.md", "\n".join(lines) + "\n")
    report.write_csv(args.out / "table.csv", rows)
    report.write_text(args.out / "paired.md", "\n".join(pairs) + "\n")
    report.write_csv(args.out / "paired.csv", pair_rows)
    plot(args.out / "accuracy.png", groups)
    plot_differences(args.out / "difference.png", groups)
    print("\n".join(lines), "", "\n".join(pairs), sep="\n")
    print(f"wrote: {', '.join(str(args.out / name) for name in FILES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
