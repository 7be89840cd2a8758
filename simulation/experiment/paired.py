"""Paired differences of a sweep's rows against a baseline algorithm (docs/running/compare-and-sweep.md): per seed,
algorithm − baseline over the seeds both completed (a seed gives both the same partition and cohorts), the mean
difference of final and best accuracy and of rounds to each target (over the pairs where both reached it) with
its 95 % t interval and a verdict (simulation/experiment/intervals.py); as a markdown table and CSV rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedsuite.config.run_config import ConfigError
from simulation.experiment import intervals
from simulation.experiment.report import markdown_table

ACCURACIES = (("final_acc", "final acc"), ("best_acc", "best acc"))  # higher is better; fewer rounds are better


def choose_baseline(algorithms: Sequence[str], chosen: str | None) -> str | None:
    """The baseline of a comparison: `chosen` (--baseline), which must be one of `algorithms`; without it fedavg
    when it is among them, else none."""
    if chosen is None:
        return "fedavg" if "fedavg" in algorithms else None
    if chosen not in algorithms:
        raise ConfigError(f"--baseline {chosen}: not among --algorithms ({', '.join(algorithms)}); name one of them")
    return chosen


def _value(run: dict, key: str):
    return run["rounds_to"].get(key.removeprefix("rounds_to_")) if key.startswith("rounds_to_") else run.get(key)


def paired_rows(rows: Sequence[dict], targets: Sequence[float], baseline: str) -> list[dict]:
    """One row per other (algorithm, grid point) against the baseline's row at the same grid point, or its only
    row when it has one (tune's final runs, each algorithm at its own tuned values): `pairs` (the seeds both
    completed), `base_grid`, and per quantity an intervals.Interval of the differences (or None)."""
    base_rows = {r["grid"]: r for r in rows if r["algorithm"] == baseline}
    only = next(iter(base_rows.values())) if len(base_rows) == 1 else None
    keys = [k for k, _ in ACCURACIES] + [f"rounds_to_{t:g}" for t in targets]
    out = []
    for row in rows:
        base = base_rows.get(row["grid"], only)
        if row["algorithm"] == baseline or base is None:
            continue
        mine, theirs = row.get("by_seed", {}), base.get("by_seed", {})
        seeds = sorted(mine.keys() & theirs.keys())
        diffs = {k: intervals.paired({s: _value(theirs[s], k) for s in seeds}, {s: _value(mine[s], k) for s in seeds})
                 for k in keys}  # fmt: skip
        out.append({"algorithm": row["algorithm"], "grid": row["grid"], "base_grid": base["grid"],
                    "pairs": len(seeds), **diffs})  # fmt: skip
    return out


def markdown(paired: Sequence[dict], targets: Sequence[float], baseline: str) -> list[str]:
    """The "Δ vs <baseline>" table, headed by what it shows and the verdict rule."""
    head = ["algorithm", "grid", "pairs", *(f"Δ {label}" for _, label in ACCURACIES),
            *(f"Δ rounds to {t:g}" for t in targets)]  # fmt: skip
    cells = []
    for p in paired:
        grid = p["grid"] if p["grid"] == p["base_grid"] else f"{p['grid']} ({baseline}: {p['base_grid']})"
        line = [p["algorithm"], grid, str(p["pairs"]),
                *(intervals.format_difference(p[k], ".4f") for k, _ in ACCURACIES)]  # fmt: skip
        for t in targets:
            diff = p[f"rounds_to_{t:g}"]  # over the k pairs where both reached t: k/pairs (one: the value alone)
            if diff is None:
                line.append("–")
                continue
            one = f"{diff.mean:+.1f}"
            value = intervals.format_difference(diff, ".1f", higher_is_better=False) if diff.n > 1 else one
            line.append(f"{value} ({diff.n}/{p['pairs']})")
        cells.append(line)
    return [f"Δ vs {baseline}: per seed, the algorithm's value minus {baseline}'s over the seeds both completed "
            "(pairs; a seed gives both the same partition and cohorts), the mean difference with its 95 % interval "
            "(Student's t over the pairs). **better** / **worse**: the interval leaves out 0; **not "
            "distinguishable**: it holds 0. Rounds to a target over the pairs where both reached it (k/pairs); "
            "fewer rounds are better.", "", *markdown_table(head, cells)]  # fmt: skip


def csv_rows(paired: Sequence[dict], targets: Sequence[float], baseline: str) -> tuple[list[dict], list[str]]:
    """sweep-paired.csv: per quantity its mean difference, interval bounds (empty without an interval), verdict
    and the number of pairs it is over."""
    keys = [(k, True) for k, _ in ACCURACIES] + [(f"rounds_to_{t:g}", False) for t in targets]
    fields = ["algorithm", "grid", "baseline", "baseline_grid", "pairs",
              *(f"{k}_{part}" for k, _ in keys for part in ("diff_mean", "diff_ci_low", "diff_ci_high", "verdict",
                                                            "pairs"))]  # fmt: skip
    out = []
    for p in paired:
        line = {"algorithm": p["algorithm"], "grid": p["grid"], "baseline": baseline, "baseline_grid": p["base_grid"],
                "pairs": p["pairs"]}  # fmt: skip
        for key, higher in keys:
            diff = p[key]
            line |= {f"{key}_diff_mean": diff and diff.mean, f"{key}_diff_ci_low": diff and diff.low,
                     f"{key}_diff_ci_high": diff and diff.high, f"{key}_verdict": intervals.verdict(diff, higher),
                     f"{key}_pairs": 0 if diff is None else diff.n}  # fmt: skip
        out.append(line)
    return out, fields
