"""One trial of a tuning (a point run once per search seed, scored on the validation split) and the two searches
that propose them: every grid point, or Optuna's seeded TPE sampler."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fedsuite.config.run_config import Scalar
from fedsuite.config.tunable import LogRange, Search, rounded
from fedsuite.results.folder import FINISHED
from simulation import sweep
from simulation.experiment import report
from simulation.experiment.jobs import Job
from simulation.experiment.runner import run_jobs
from simulation.tuning.space import Point, TuneError, grid_points

# --- one trial ------------------------------------------------------------------------------------------------------


def score_column(evaluation: str, score: str = "accuracy") -> str:
    """The rounds.jsonl column a trial is scored on: central validation unless evaluation is federated only."""
    return ("fed_val_" if evaluation == "federated" else "val_") + score


def column_values(folder: Path, column: str) -> dict[int, float]:
    """{round: value} of `column` in the run's rounds.jsonl, for the rounds after 0 that have it."""
    return {int(row["round"]): float(row[column]) for row in report.read_rows(folder)
            if row["round"] > 0 and row.get(column) is not None}  # fmt: skip


def validation_score(folder: Path, column: str, last: int) -> float:
    """The mean of `column` over the last `last` evaluations of the run in `folder`."""
    values = list(column_values(folder, column).values())
    if not values:
        hint = "; a task without accuracy (regression) is scored with --score loss" if "accuracy" in column else ""
        raise TuneError(f"{folder}: rounds.jsonl has no {column!r} values{hint}")
    tail = values[-last:]
    return sum(tail) / len(tail)


@dataclass
class Trial:
    """One point of the search, run once per search seed."""

    number: int
    algorithm: str
    point: Point
    seeds: Sequence[int]
    statuses: Sequence[str]  # per seed: completed, budget-spent, failed, diverged …
    scores: Sequence[float | None]  # per seed: the validation score of a finished run, else None
    origin: str = ""  # a --budget search: what proposed the point (grid, TPE, or the seeded order after repeats)
    repeats: int = 0  # a --budget search: later proposals of the same point (told its score, nothing run)
    # --prune (simulation/tuning/pruning.py): the validation curve (round → mean over the seeds), the rounds its
    # runs took and would have taken in full, and the round of its earliest pruned seed (None: not pruned)
    curve: dict[int, float] = field(default_factory=dict)
    rounds_run: int = 0
    rounds_planned: int = 0
    pruned_at: int | None = None
    rounds_saved: int = 0  # the rounds its pruned seeds did not run
    no_better: int = 0  # finished seeds whose last model is no better than the initial one (learned nothing)

    @property
    def status(self) -> str:
        """completed when every seed completed; budget-spent when every seed finished (completed, or stopped by its
        target ε) and one spent its budget; else diverged if a seed diverged, else the first other status."""
        if all(s == "completed" for s in self.statuses):
            return "completed"
        if all(s in FINISHED for s in self.statuses):
            return "budget-spent"
        return "diverged" if "diverged" in self.statuses else next(s for s in self.statuses if s not in FINISHED)

    @property
    def score(self) -> float | None:
        """The mean score over the seeds; None unless every seed finished with a finite score."""
        if self.status not in FINISHED or any(s is None or not math.isfinite(s) for s in self.scores):
            return None
        return sum(self.scores) / len(self.scores)

    @property
    def values(self) -> dict[str, Scalar]:
        return dict(self.point)


@dataclass(frozen=True)
class Setting:
    """What every trial of one tuning shares: the run config, the seeds, where runs go, how they run and score."""

    shared: dict  # the search runs' explicit settings (validation-fraction included)
    seeds: Sequence[int]
    out: Path  # <out>/search
    engine: str
    parallel: int
    column: str  # the rounds.jsonl column a run is scored by
    last: int
    maximize: bool

    def jobs(self, algorithm: str, point: Point) -> list[Job]:
        return sweep.jobs_for([algorithm], [point], list(self.seeds), self.shared, self.out,
                              group=stage_group(self.out), state_base=self.out.parent)  # fmt: skip


def stage_group(folder: Path) -> str:
    """The tracking group of a tuning's stage: `<out>/search` or `<out>/final` (two tunings do not share one)."""
    return f"{folder.parent.name}/{folder.name}"


def run_points(setting: Setting, pairs: Sequence[tuple[str, Point]]) -> dict[Path, str]:
    """Run every (algorithm, point) on every search seed (K at once, completed and diverged runs reused); the
    status of each run folder. A pair given twice runs once."""
    jobs = [job for algorithm, point in dict.fromkeys(pairs) for job in setting.jobs(algorithm, point)]
    return {o.job.folder: o.status for o in run_jobs(jobs, setting.engine, setting.parallel, reuse=True)}


def trials_from(setting: Setting, algorithm: str, points: Sequence[Point], statuses: Mapping[Path, str],
                first_number: int = 1) -> list[Trial]:  # fmt: skip
    """The trials of `points` from their runs' statuses, each completed run scored on the validation column."""
    trials = []
    for number, point in enumerate(points, first_number):
        folders = [job.folder for job in setting.jobs(algorithm, point)]
        scored = [_scored(setting, f, statuses[f]) for f in folders]
        status, scores = [st for st, _ in scored], [sc for _, sc in scored]
        no_better = sum(1 for f, st in zip(folders, status, strict=True) if st in FINISHED and learned_nothing(f))
        trials.append(Trial(number, algorithm, point, list(setting.seeds), status, scores, no_better=no_better))
    return trials


def _scored(setting: Setting, folder: Path, status: str) -> tuple[str, float | None]:
    """One seed's status and validation score (None unless it finished: completed, or stopped by its target ε); a
    run whose rounds.jsonl is damaged is named and has none (its trial is never chosen; a rerun runs it again)."""
    if status not in FINISHED:
        return status, None
    try:
        return status, validation_score(folder, setting.column, setting.last)
    except report.DamagedRun as err:
        print(f"   {err}", file=sys.stderr, flush=True)
        return "damaged", None


def learned_nothing(folder: Path) -> bool:
    """The run's summary.json says its last model is no better than its initial one (`no_better_than_initial`)."""
    try:
        return bool(report.read_summary(folder).get("no_better_than_initial"))
    except (OSError, report.DamagedRun, AttributeError):
        return False


def run_trials(setting: Setting, algorithm: str, points: Sequence[Point], first_number: int = 1) -> list[Trial]:
    """Run and score `points` of one algorithm (numbered from `first_number`)."""
    statuses = run_points(setting, [(algorithm, p) for p in points])
    return trials_from(setting, algorithm, points, statuses, first_number)


def chosen(trials: Sequence[Trial], maximize: bool = True) -> Trial | None:
    """The trial with the best mean validation score (the first of equals); None when no trial has a score."""
    best = None
    for trial in trials:
        if trial.score is None:
            continue
        if best is None or (trial.score > best.score if maximize else trial.score < best.score):
            best = trial
    return best


# --- searches -------------------------------------------------------------------------------------------------------


def grid_search(setting: Setting, spaces: Mapping[str, Mapping[str, Search]], run: Runner | None = None
                ) -> dict[str, list[Trial]]:  # fmt: skip
    """Every algorithm's grid, all runs of all algorithms in one batch (so --parallel keeps K busy); with a runner
    of its own (--prune), each algorithm's points in batches of --parallel, one batch after the other."""
    points = {a: grid_points(space) for a, space in spaces.items()}
    if run is not None:
        size = max(setting.parallel, 1)
        return {a: [t for i in range(0, len(ps), size) for t in run(setting, a, ps[i : i + size], i + 1)]
                for a, ps in points.items()}  # fmt: skip
    statuses = run_points(setting, [(a, p) for a, ps in points.items() for p in ps])
    return {a: trials_from(setting, a, ps, statuses) for a, ps in points.items()}


def _suggest(trial, space: Mapping[str, Search]) -> Point:
    """Optuna's proposal for one trial: a log range drawn on a log scale (to 3 significant digits), a value list
    picked from."""
    point = []
    for key, search in space.items():
        if isinstance(search, LogRange):
            value = rounded(trial.suggest_float(key, search.low, search.high, log=True))
            point.append((key, min(max(value, search.low), search.high)))
        else:
            point.append((key, trial.suggest_categorical(key, list(search))))
    return tuple(point)


Runner = Callable[[Setting, str, Sequence[Point], int], list[Trial]]


def optuna_search(setting: Setting, algorithm: str, space: Mapping[str, Search], trials: int, sampler_seed: int,
                  run: Runner = run_trials) -> list[Trial]:  # fmt: skip
    """`trials` points proposed by Optuna's TPE sampler (seeded: the same scores give the same proposals), asked
    --parallel at a time; a trial without a score is told as failed (it never counts as a result)."""
    try:
        import optuna
    except ImportError as err:
        raise TuneError("--search optuna needs the optuna package: pip install optuna") from err
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=sampler_seed)
    study = optuna.create_study(direction="maximize" if setting.maximize else "minimize", sampler=sampler)
    done: list[Trial] = []
    while len(done) < trials:
        asked = [study.ask() for _ in range(min(max(setting.parallel, 1), trials - len(done)))]
        results = run(setting, algorithm, [_suggest(t, space) for t in asked], len(done) + 1)
        for proposal, result in zip(asked, results, strict=True):
            tell(study, proposal, result)
        done += results
    return done


def tell(study, asked, trial: Trial) -> None:
    """Tell Optuna a trial's score; a pruned one as pruned, with its curve as its intermediate values; one without
    a score as failed (it never counts as a result)."""
    import optuna

    if trial.pruned_at is not None and trial.score is None:
        for step, value in trial.curve.items():
            asked.report(value, step)
        study.tell(asked, state=optuna.trial.TrialState.PRUNED)
    elif trial.score is None:
        study.tell(asked, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(asked, trial.score)
