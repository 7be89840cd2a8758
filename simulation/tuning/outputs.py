"""What a tuning writes: the per-algorithm search tables (search/<algorithm>.md, .csv) and tune.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fedsuite.config.run_config import Scalar
from simulation import sweep
from simulation.experiment import report
from simulation.tuning.trials import Setting, Trial

# --- outputs --------------------------------------------------------------------------------------------------------


def search_rows(trials: Sequence[Trial], best: Trial | None) -> tuple[list[dict], list[str]]:
    """One row per trial: number, its values, per-seed scores, mean score, status, chosen; where a trial has seeds
    that learned nothing, how many (no_better_than_initial)."""
    keys = list(dict.fromkeys(k for t in trials for k, _ in t.point))
    seeds = list(trials[0].seeds) if trials else []
    budgeted = any(t.origin for t in trials)  # a --budget search also says what proposed each point
    pruning = any(t.rounds_planned for t in trials)  # --prune: where each trial stopped and the rounds it took
    learned = any(t.no_better for t in trials)  # seeds whose last model is no better than the initial one
    fields = ["trial", *keys, *(f"seed_{s}" for s in seeds), "mean_score", "status", "chosen",
              *(["proposed_by", "repeated_proposals"] if budgeted else []),
              *(["pruned_at_round", "rounds_run"] if pruning else []),
              *(["no_better_than_initial"] if learned else [])]  # fmt: skip
    rows = []
    for t in trials:
        rows.append({"trial": t.number, **t.values, **{f"seed_{s}": v for s, v in zip(seeds, t.scores, strict=True)},
                     "mean_score": t.score, "status": t.status, "chosen": t is best,
                     **({"proposed_by": t.origin, "repeated_proposals": t.repeats} if budgeted else {}),
                     **({"pruned_at_round": t.pruned_at, "rounds_run": f"{t.rounds_run}/{t.rounds_planned}"}
                        if pruning else {}),
                     **({"no_better_than_initial": f"{t.no_better}/{len(seeds)}"} if learned else {})})  # fmt: skip
    return rows, fields


def _cell(field: str, value) -> str:
    if field == "chosen":
        return "✓" if value else ""
    if field.startswith("seed_") or field == "mean_score":
        return report.fmt(value, ".4f")
    return "–" if value is None else str(value)


_BUDGET_NOTE = (
    " Every trial is a distinct point; `repeated proposals` counts the later proposals of the same "
    "point, which were told its score and ran nothing."
)


def search_markdown(algorithm: str, trials: Sequence[Trial], best: Trial | None, column: str, last: int) -> str:
    rows, fields = search_rows(trials, best)
    head = [f.replace("seed_", "seed ").replace("_", " ") for f in fields]
    cells = [[_cell(f, r[f]) for f in fields] for r in rows]
    lines = [f"# {algorithm}: search on the validation split", "",
             f"Score: mean `{column}` over the last {last} evaluations, per seed; mean over the seeds. A trial "
             "with a failed, diverged or pruned seed has no score and is never chosen." + (_BUDGET_NOTE if
                                                                                   "proposed_by" in fields else ""),
             "",
             *report.markdown_table(head, cells),
             *(["", report.NO_BETTER_NOTE] if "no_better_than_initial" in fields else [])]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_search(out: Path, algorithm: str, trials: Sequence[Trial], best: Trial | None, column: str,
                 last: int) -> None:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    rows, fields = search_rows(trials, best)
    report.write_csv(out / f"{algorithm}.csv", rows, fields)
    report.write_text(out / f"{algorithm}.md", search_markdown(algorithm, trials, best, column, last))


def final_settings(shared: Mapping[str, Scalar]) -> dict:
    """The final runs' shared settings: no validation split (all training data), rounds-to-target on the test
    metric where the search read a validation one."""
    settings = {**shared, "validation-fraction": 0.0}
    metric = str(settings.get("target-metric", "auto"))
    if metric.endswith("val-accuracy"):
        settings["target-metric"] = metric.replace("val-", "")
    return settings


def points_tried(trials: Sequence[Trial], space_size: int | None) -> str:
    """The distinct points an algorithm's search tried, of its space's grid points ("12 of 20", "5 of 5 (the full
    grid)"); without the space's size, the count alone."""
    distinct = len({t.point for t in trials})
    if space_size is None:
        return str(distinct)
    return f"{distinct} of {space_size}" + (" (the full grid)" if distinct == space_size else "")


def summary_markdown(results: Mapping[str, list[Trial]], best: Mapping[str, Trial | None], setting: Setting,
                     command: str, final_text: str, space_sizes: Mapping[str, int] | None = None,
                     compute: Mapping | None = None) -> str:  # fmt: skip
    """tune.md: the command, per algorithm the chosen values, their score, the scored trials and the distinct
    points tried (of its space's size), and the final runs' table."""
    learned_nothing = any(t is not None and t.no_better for t in best.values())
    head = ["algorithm", "chosen values", f"validation score ({setting.column})", "trials with a score",
            "distinct points tried", *([report.NO_BETTER] if learned_nothing else [])]  # fmt: skip
    cells = []
    for algorithm, trials in results.items():
        pick = best[algorithm]
        values = ", ".join(f"{k}={v}" for k, v in pick.point) if pick else "none: no trial completed"
        cells.append([algorithm, values, report.fmt(pick.score if pick else None, ".4f"),
                      f"{sum(1 for t in trials if t.score is not None)}/{len(trials)}",
                      points_tried(trials, (space_sizes or {}).get(algorithm))])  # fmt: skip
        if learned_nothing:  # of the chosen trial's seeds
            cells[-1].append(f"{pick.no_better}/{len(pick.seeds)}" if pick else "–")
    spent = [] if compute is None else [
        "", f"Search compute: {compute['rounds_run']} of {compute['rounds_planned']} planned rounds; pruning stopped "
        f"{compute['pruned_trials']} of {compute['trials']} trials early and saved {compute['saved']:.0%} of the "
        "planned rounds (the rounds their pruned runs did not run)."]  # fmt: skip
    learned = ["", report.NO_BETTER_NOTE] if learned_nothing else []
    lines = [f"Reproduce: `{command}`", "", "## Chosen on the validation split", "",
             *report.markdown_table(head, cells), *learned, *spent, "",
             "## Final runs (test accuracy, no validation split)", "",
             final_text.partition("\n\n")[2] if final_text.startswith("Reproduce:") else "No final runs."]  # fmt: skip
    return "\n".join(lines) + "\n"


def outputs(out: Path, algorithms: Sequence[str]) -> list[Path]:
    """The files a tuning writes in <out> besides the runs: search tables, tuned.toml, the final report, tune.md."""
    search = [out / "search" / f"{a}.{ext}" for a in algorithms for ext in ("md", "csv")]
    return [*search, out / "tuned.toml", *sweep.outputs(out / "final"), out / "tune.md"]
