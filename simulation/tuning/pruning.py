"""`--prune median`: a trial whose runs fall behind the trials before them stops early (docs/running/tuning.md#pruning).

Optuna's median rule (its MedianPruner): at an evaluated round r, a trial worse than the median of the completed
trials' values at r is stopped. Here the completed trials are those of the algorithm's search that have already
run to their last round on every seed (a pruned, diverged or failed trial gives no curve), in whole batches of
--parallel points: before a batch, their validation curves (each trial's value at every evaluated round, the mean
over its seeds) give one mark per evaluated round r from WARMUP of the run on (the last round excluded), the median
of the values at r, once STARTUP completed trials have one. The marks go into the batch's runs as the run-config
key `prune-at` (fedsuite/server/pruning.py), and each run checks its own value at the end of every marked round and
stops itself (status `pruned`) when it is worse. So the marks depend only on finished runs: the same command (--parallel
included: it sets the batches) prunes the same runs at the same rounds with any engine and any timing, and a tuning that
was stopped resumes with the same marks and reuses its pruned runs. A trial with a pruned seed has no score and is never
chosen; Optuna is told it was pruned, with its curve as its intermediate values.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedsuite.results.folder import FINISHED
from fedsuite.server.pruning import PRUNED, format_marks
from simulation.experiment import report
from simulation.tuning.space import Point, TuneError
from simulation.tuning.trials import Setting, Trial, column_values, run_trials

PRUNERS = ("off", "median")
STARTUP = 4  # completed trials with a value at r before r gets a mark (Optuna's MedianPruner waits for 5 by default)
WARMUP = 0.25  # no mark before this share of the run's rounds: early curves cross


def check_prunable(run_config: dict, pruner: str) -> None:
    """A pruner needs evaluations before the last round to compare: one line otherwise."""
    if pruner == "off":
        return
    rounds, every = int(run_config["num-server-rounds"]), int(run_config["eval-every"])
    if every >= rounds or rounds < 2:
        raise TuneError(f"--prune {pruner}: the search runs evaluate only at their last round (eval-every={every}, "
                        f"num-server-rounds={rounds}), so there is nothing to stop a run on; give eval-every < "
                        "num-server-rounds or leave out --prune")  # fmt: skip


def seed_curve(folder: Path, column: str) -> dict[int, float]:
    """One run's curve of `column` (trials.column_values); none for a run without readable rows."""
    try:
        return column_values(folder, column)
    except (OSError, report.DamagedRun):
        return {}


def rounds_run(folder: Path) -> int:
    """The rounds a run completed (summary.json), 0 when it has no readable summary."""
    try:
        return int(report.read_summary(folder).get("rounds_completed") or 0)
    except (OSError, report.DamagedRun, TypeError, ValueError):
        return 0


class MedianPruning:
    """A trial runner (simulation.tuning.trials.Runner) for one tuning: each batch runs with the marks of the
    trials of its algorithm that ran before it (module docstring)."""

    def __init__(self, rounds: int):
        self.rounds = rounds
        self.curves: dict[str, list[dict[int, float]]] = {}

    def marks(self, algorithm: str) -> dict[int, float]:
        curves = self.curves.get(algorithm, [])
        marks = {}
        for r in sorted({r for curve in curves for r in curve}):
            if r < WARMUP * self.rounds or r >= self.rounds:
                continue
            values = [curve[r] for curve in curves if r in curve]
            if len(values) >= STARTUP:
                marks[r] = statistics.median(values)
        return marks

    def __call__(self, setting: Setting, algorithm: str, points: list[Point], first_number: int = 1) -> list[Trial]:
        marks = self.marks(algorithm)
        batch = setting
        if marks:
            extra = {"prune-at": format_marks(marks), "prune-score": setting.column}
            batch = replace(setting, shared={**setting.shared, **extra})
        trials = run_trials(batch, algorithm, points, first_number)
        for trial, point in zip(trials, points, strict=True):
            folders = [job.folder for job in batch.jobs(algorithm, point)]
            describe(trial, folders, setting.column, self.rounds)
            if trial.status in FINISHED:  # as Optuna's rule: completed trials only
                self.curves.setdefault(algorithm, []).append(trial.curve)
        return trials


def describe(trial: Trial, folders: list[Path], column: str, rounds: int) -> None:
    """The trial's curve (mean over its seeds, at the rounds every seed reached), the rounds its runs took and, when
    a seed was pruned, the round of the earliest stop."""
    curves = [seed_curve(folder, column) for folder in folders]
    common = set.intersection(*(set(c) for c in curves)) if curves else set()
    trial.curve = {r: sum(c[r] for c in curves) / len(curves) for r in sorted(common)}
    trial.rounds_run = sum(rounds_run(folder) for folder in folders)
    trial.rounds_planned = rounds * len(folders)
    stops = [rounds_run(folder) for folder, status in zip(folders, trial.statuses, strict=True) if status == PRUNED]
    trial.pruned_at = min(stops) if stops else None
    trial.rounds_saved = sum(rounds - stop for stop in stops)


def compute_line(trials: dict[str, list[Trial]]) -> dict[str, Any]:
    """Rounds the search ran, the rounds its runs would have taken in full, and the share pruning saved: the rounds
    its pruned runs did not run (a diverged or failed run's missing rounds are not pruning's)."""
    run = sum(t.rounds_run for ts in trials.values() for t in ts if t.rounds_planned)
    planned = sum(t.rounds_planned for ts in trials.values() for t in ts if t.rounds_planned)
    saved = sum(t.rounds_saved for ts in trials.values() for t in ts)
    pruned = sum(1 for ts in trials.values() for t in ts if t.pruned_at is not None)
    return {"rounds_run": run, "rounds_planned": planned, "saved": saved / planned if planned else 0.0,
            "pruned_trials": pruned, "trials": sum(len(ts) for ts in trials.values())}  # fmt: skip
