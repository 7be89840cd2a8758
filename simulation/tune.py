"""Per-algorithm tuning on a validation split: every method gets its own step size and main hyper-parameter,
chosen without looking at the test set; then fresh seeds, trained on all the training data, report test accuracy.

    python -m simulation.tune --algorithms fedavg,fedcm,scaffold -c "num-server-rounds=100 partition-alpha=0.1" \\
        --seeds 0,1 --final-seeds 10,11,12 --out results/tune --engine inprocess --parallel 2
    python -m simulation.tune --algorithms fedcm --search optuna --trials 20 ...   # budgeted TPE search
    python -m simulation.tune --list                                            # what each algorithm searches

What is searched is the registry's `tunable` declaration of each algorithm (fedsuite/registry.py; `--space`
replaces or adds keys). `--search grid` tries every combination of the declared values (a log range gives its
grid points); `--search optuna` lets Optuna's TPE sampler, seeded by --sampler-seed, propose --trials points
(--parallel K at a time), so the same command proposes the same trials. Every trial runs once per search seed with
`validation-fraction` (0.1 unless -c sets it) and is scored by the validation accuracy only (rounds.jsonl
`val_accuracy`, or `fed_val_accuracy` under evaluation='federated'; `--score loss` reads the validation loss),
the mean over the last --last evaluations, averaged over the seeds. A trial with a seed that failed or diverged
keeps that status and has no score; it is never chosen.

Outputs in --out: search/<algorithm>.csv and .md (every trial: its values, per-seed scores, mean, status),
search/runs/… (the trial runs), tuned.toml (the chosen values; fedsuite.tuned reads it), final/ (the chosen values
on --final-seeds with validation-fraction=0: final/sweep.md, sweep.csv, sweep.png in simulation.sweep's format)
and tune.md (chosen values, validation scores, the final table). Every run goes through simulation.experiment: a
stopped tuning resumes where it stopped (completed and diverged runs are reused), --parallel K runs K at once.
Exit 0 when every algorithm got tuned values and every final run completed, 1 otherwise, 2 for bad settings.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedsuite import tuned as tuned_file
from fedsuite.config import SCHEMA, ConfigError, Scalar, active_schema
from fedsuite.data_checks import check_evaluation_data
from fedsuite.tunable import LogRange, Search, describe, grid_values, problem, rounded
from simulation import sweep
from simulation.experiment import report
from simulation.experiment.engines import ENGINE_HELP, ENGINES
from simulation.experiment.flags import parse_list, parse_value
from simulation.experiment.fresh_runs import refuse_resume
from simulation.experiment.jobs import Job, resolved, reusable
from simulation.experiment.jobs import validate as validate_jobs
from simulation.experiment.runner import run_jobs
from simulation.experiment.study import Study
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight

SEARCHES = ("grid", "optuna")
SCORES = ("accuracy", "loss")
DEFAULT_VALIDATION_FRACTION = 0.1
# keys a tuning sets itself (their `tunable=False` tag, fedsuite.config): the run's identity, the seeds, where it
# writes, the validation split it is scored on
NOT_TUNABLE = tuple(name for name, key in SCHEMA.items() if not key.tunable)
Point = tuple[tuple[str, Scalar], ...]  # one trial's values, in the space's key order


class TuneError(ConfigError):
    """A tuning setting that cannot work (one line naming the flag or key)."""


# --- what is searched -----------------------------------------------------------------------------------------------


def search_space(algorithm: str, replaced: Mapping[str, tuple[Scalar, ...]] | None = None) -> dict[str, Search]:
    """The algorithm's declared tunable keys, with `replaced` keys' values replacing (or adding to) them; every
    value checked against its key's schema range."""
    from fedsuite.registry import ALGORITHMS

    if algorithm not in ALGORITHMS:
        raise TuneError(f"--algorithms {algorithm!r}: allowed are {', '.join(ALGORITHMS)}")
    space: dict[str, Search] = {**ALGORITHMS[algorithm].tunable, **(replaced or {})}
    if not space:
        raise TuneError(f"algorithm {algorithm!r} declares no tunable keys (Algorithm.tunable); give them with "
                        "--space 'lr=0.01,0.1'")  # fmt: skip
    schema = active_schema()
    for key, search in space.items():
        if key in NOT_TUNABLE:
            raise TuneError(f"{algorithm}: {key} cannot be searched (the tuning sets it); tunable keys are "
                            "hyper-parameters such as lr")  # fmt: skip
        if (error := problem(key, search, schema.get(key))) is not None:
            raise TuneError(f"{algorithm}: {error}")
    return space


def parse_space(text: str) -> dict[tuple[str | None, str], tuple[Scalar, ...]]:
    """`--space "lr=0.01,0.1 fedcm:fedcm-alpha=0.1,0.3"` → {(algorithm or None, key): values} (TOML values)."""
    axes: dict[tuple[str | None, str], tuple[Scalar, ...]] = {}
    for item in text.split():
        name, sep, values = item.partition("=")
        scope, colon, key = name.rpartition(":")
        if not sep or not values or not key or (colon and not scope):
            raise TuneError(f"--space {item!r}: write key=value1,value2 or algorithm:key=value1,value2")
        if (scope or None, key) in axes:
            raise TuneError(f"--space: {name} is given twice")
        try:
            parsed = tuple(parse_value("--space", key, v) for v in values.split(","))
        except ConfigError as err:
            raise TuneError(str(err)) from None
        axes[(scope or None, key)] = tuple(dict.fromkeys(parsed))
    return axes


def spaces_for(algorithms: Sequence[str], replaced: Mapping[tuple[str | None, str], tuple[Scalar, ...]]
               ) -> dict[str, dict[str, Search]]:  # fmt: skip
    """Every algorithm's search space with --space applied: `algorithm:key` for that algorithm only; a plain key
    replaces the values of every algorithm that declares it, and is added to all when none of them does; the scoped
    form wins."""
    from fedsuite.registry import ALGORITHMS

    unknown = sorted({scope for scope, _ in replaced if scope is not None} - set(algorithms))
    if unknown:
        raise TuneError(f"--space {unknown[0]}:…: {unknown[0]!r} is not among --algorithms ({', '.join(algorithms)})")
    declared = {key for a in algorithms if a in ALGORITHMS for key in ALGORITHMS[a].tunable}
    spaces = {}
    for algorithm in algorithms:
        own = ALGORITHMS[algorithm].tunable if algorithm in ALGORITHMS else {}
        mine = {key: values for (scope, key), values in replaced.items()
                if scope is None and (key in own or key not in declared)}  # fmt: skip
        mine.update({key: values for (scope, key), values in replaced.items() if scope == algorithm})
        spaces[algorithm] = search_space(algorithm, mine)
    return spaces


def grid_points(space: Mapping[str, Search]) -> list[Point]:
    """Every combination of the declared values, in the declared order (the first key varies slowest)."""
    keys = list(space)
    combinations = itertools.product(*(grid_values(space[k]) for k in keys))
    return [tuple(zip(keys, values, strict=True)) for values in combinations]


def tunable_table() -> str:
    """Markdown table of what every registered algorithm searches (`--list`)."""
    from fedsuite.registry import ALGORITHMS

    schema = active_schema()
    rows = []
    for name, algorithm in ALGORITHMS.items():
        for key, search in algorithm.tunable.items():
            default = schema[key].default if key in schema else "?"
            rows.append([f"`{name}`", f"`{key}`", describe(search), f"`{default}`"])
        if not algorithm.tunable:
            rows.append([f"`{name}`", "—", "declares none (give --space)", ""])
    return "\n".join(report.markdown_table(["algorithm", "key", "searched", "default"], rows))


# --- one trial ------------------------------------------------------------------------------------------------------


def score_column(evaluation: str, score: str = "accuracy") -> str:
    """The rounds.jsonl column a trial is scored on: central validation unless evaluation is federated only."""
    return ("fed_val_" if evaluation == "federated" else "val_") + score


def validation_score(folder: Path, column: str, last: int) -> float:
    """The mean of `column` over the last `last` evaluations of the run in `folder`."""
    values = [row[column] for row in report.read_rows(folder) if row["round"] > 0 and row.get(column) is not None]
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
    statuses: Sequence[str]  # per seed: completed, failed, diverged …
    scores: Sequence[float | None]  # per seed: the validation score of a completed run, else None

    @property
    def status(self) -> str:
        """completed when every seed completed; else diverged if a seed diverged, else the first other status."""
        if all(s == "completed" for s in self.statuses):
            return "completed"
        return "diverged" if "diverged" in self.statuses else next(s for s in self.statuses if s != "completed")

    @property
    def score(self) -> float | None:
        """The mean score over the seeds; None unless every seed completed with a finite score."""
        if self.status != "completed" or any(s is None or not math.isfinite(s) for s in self.scores):
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
        return sweep.jobs_for(
            [algorithm], [point], list(self.seeds), self.shared, self.out, group=stage_group(self.out)
        )


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
        trials.append(Trial(number, algorithm, point, list(setting.seeds), status, scores))
    return trials


def _scored(setting: Setting, folder: Path, status: str) -> tuple[str, float | None]:
    """One seed's status and validation score (None unless it completed); a run whose rounds.jsonl is damaged is
    named and has none (its trial is never chosen; a rerun of the tuning runs it again)."""
    if status != "completed":
        return status, None
    try:
        return status, validation_score(folder, setting.column, setting.last)
    except report.DamagedRun as err:
        print(f"   {err}", file=sys.stderr, flush=True)
        return "damaged", None


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


def grid_search(setting: Setting, spaces: Mapping[str, Mapping[str, Search]]) -> dict[str, list[Trial]]:
    """Every algorithm's grid, all runs of all algorithms in one batch (so --parallel keeps K busy)."""
    points = {a: grid_points(space) for a, space in spaces.items()}
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
            if result.score is None:
                study.tell(proposal, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(proposal, result.score)
        done += results
    return done


# --- outputs --------------------------------------------------------------------------------------------------------


def search_rows(trials: Sequence[Trial], best: Trial | None) -> tuple[list[dict], list[str]]:
    """One row per trial: number, its values, per-seed scores, mean score, status, chosen."""
    keys = list(dict.fromkeys(k for t in trials for k, _ in t.point))
    seeds = list(trials[0].seeds) if trials else []
    fields = ["trial", *keys, *(f"seed_{s}" for s in seeds), "mean_score", "status", "chosen"]
    rows = []
    for t in trials:
        rows.append({"trial": t.number, **t.values, **{f"seed_{s}": v for s, v in zip(seeds, t.scores, strict=True)},
                     "mean_score": t.score, "status": t.status, "chosen": t is best})  # fmt: skip
    return rows, fields


def _cell(field: str, value) -> str:
    if field == "chosen":
        return "✓" if value else ""
    if field.startswith("seed_") or field == "mean_score":
        return report.fmt(value, ".4f")
    return "–" if value is None else str(value)


def search_markdown(algorithm: str, trials: Sequence[Trial], best: Trial | None, column: str, last: int) -> str:
    rows, fields = search_rows(trials, best)
    head = [f.replace("seed_", "seed ").replace("_", " ") for f in fields]
    cells = [[_cell(f, r[f]) for f in fields] for r in rows]
    lines = [f"# {algorithm}: search on the validation split", "",
             f"Score: mean `{column}` over the last {last} evaluations, per seed; mean over the seeds. A trial "
             "with a failed or diverged seed has no score and is never chosen.", "",
             *report.markdown_table(head, cells)]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_search(out: Path, algorithm: str, trials: Sequence[Trial], best: Trial | None, column: str,
                 last: int) -> None:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    rows, fields = search_rows(trials, best)
    report.write_csv(out / f"{algorithm}.csv", rows, fields)
    (out / f"{algorithm}.md").write_text(search_markdown(algorithm, trials, best, column, last))


def final_settings(shared: Mapping[str, Scalar]) -> dict:
    """The final runs' shared settings: no validation split (all training data), rounds-to-target on the test
    metric where the search read a validation one."""
    settings = {**shared, "validation-fraction": 0.0}
    metric = str(settings.get("target-metric", "auto"))
    if metric.endswith("val-accuracy"):
        settings["target-metric"] = metric.replace("val-", "")
    return settings


# --- the command ----------------------------------------------------------------------------------------------------


def _seeds(text: str, flag: str) -> list[int]:
    try:
        seeds = parse_list(text, flag, int)  # a seed given twice is refused, naming it
    except ConfigError as err:
        raise TuneError(str(err)) from None
    if min(seeds) < 0:
        raise TuneError(f"{flag} {text!r}: seed {min(seeds)} is negative; seeds are >= 0")
    return seeds


def _command(args: argparse.Namespace) -> str:
    parts = ["python -m simulation.tune", f"--algorithms {args.algorithms}", f"--seeds {args.seeds}",
             f"--search {args.search}"]  # fmt: skip
    if args.search == "optuna":
        parts.append(f"--trials {args.trials} --sampler-seed {args.sampler_seed}")
    if args.space:
        parts.append(f'--space "{args.space}"')
    if args.score != "accuracy" or args.last != 3:
        parts.append(f"--score {args.score} --last {args.last}")
    parts += [f'-c "{c}"' for c in args.run_config]
    parts += [f"--final-seeds {args.final_seeds}", f"--engine {args.engine}"]
    if args.parallel > 1:  # an Optuna search asks K trials at a time: K is part of what it proposes
        parts.append(f"--parallel {args.parallel}")
    return " ".join([*parts, f"--out {args.out}"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The tuning's flags."""
    parser.add_argument("--algorithms", help="comma-separated registered algorithms")
    parser.add_argument("-c", "--run-config", action="append", default=[], help="shared key=value overrides")
    parser.add_argument("--seeds", default="0,1", help="search seeds: every trial runs once per seed")
    parser.add_argument("--search", choices=SEARCHES, default="grid")
    parser.add_argument("--trials", type=int, default=0, help="--search optuna: trials per algorithm")
    parser.add_argument("--sampler-seed", type=int, default=0, help="--search optuna: the TPE sampler's seed")
    parser.add_argument("--space", default="",
                        help='replace or add searched values: "lr=0.01,0.1 fedcm:fedcm-alpha=0.1,0.3"')  # fmt: skip
    parser.add_argument("--score", choices=SCORES, default="accuracy",
                        help="validation accuracy (higher is better) or validation loss (lower)")  # fmt: skip
    parser.add_argument("--last", type=int, default=3, help="evaluations averaged into a run's score")
    parser.add_argument("--final-seeds", default="10,11,12", help="seeds of the final runs; none = no final runs")
    parser.add_argument("--out", default="results/tune")
    parser.add_argument("--engine", choices=ENGINES, default="flwr", help=ENGINE_HELP)
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (separate processes)")
    parser.add_argument("--title", default="")
    parser.add_argument("--list", action="store_true", help="print what every algorithm searches and exit")
    parser.add_argument("--dry-run", action="store_true", help="check the settings, print the plan and exit")


def plan(args: argparse.Namespace) -> tuple[list[str], dict[str, dict[str, Search]], Setting, dict, list[int]]:
    """Everything checked before any run: algorithms, spaces, seeds, the search and final settings."""
    if not args.algorithms:
        raise TuneError("--algorithms: give at least one")
    try:
        algorithms = parse_list(args.algorithms, "--algorithms")  # one given twice is refused, naming it
    except ConfigError as err:
        raise TuneError(str(err)) from None
    if args.search == "optuna" and args.trials < 1:
        raise TuneError("--search optuna: give --trials N (N >= 1)")
    if args.parallel < 1 or args.last < 1:
        raise TuneError("--parallel and --last: must be >= 1")
    seeds = _seeds(args.seeds, "--seeds")
    final_seeds = _seeds(args.final_seeds, "--final-seeds") if args.final_seeds.strip().lower() != "none" else []
    if overlap := sorted(set(seeds) & set(final_seeds)):
        raise TuneError(f"--final-seeds {args.final_seeds}: seed {overlap[0]} is also a search seed; the final runs "
                        "need fresh seeds")  # fmt: skip
    shared = parse_overrides(args.run_config)
    refuse_resume(shared, "simulation.tune", "")
    if shared.get("validation-fraction", DEFAULT_VALIDATION_FRACTION) == 0:
        raise TuneError("validation-fraction=0: tuning scores trials on a validation split; give a value in (0, 1) "
                        f"or leave it out ({DEFAULT_VALIDATION_FRACTION})")  # fmt: skip
    search_shared = {"validation-fraction": DEFAULT_VALIDATION_FRACTION, **shared}
    spaces = spaces_for(algorithms, parse_space(args.space))
    cfg = resolved(search_shared)
    out = Path(args.out).resolve()
    column = score_column(str(cfg["evaluation"]), args.score)
    setting = Setting(search_shared, seeds, out / "search", args.engine, args.parallel, column, args.last,
                      args.score == "accuracy")  # fmt: skip
    # every grid point of every algorithm (an Optuna search draws inside the same ranges), and the final runs
    configs = validate_jobs([j for a, space in spaces.items() for p in grid_points(space) for j in setting.jobs(a, p)])
    check_evaluation_data(configs[0])  # a validation split empty for every client: refused before any run
    final = final_settings(shared)
    validate_jobs([j for a, space in spaces.items() for j in sweep.jobs_for([a], grid_points(space)[:1], final_seeds,
                                                                            final, out / "final")])  # fmt: skip
    return algorithms, spaces, setting, final, final_seeds


def print_plan(spaces: Mapping[str, Mapping[str, Search]], setting: Setting, args: argparse.Namespace,
               final_seeds: list[int]) -> None:  # fmt: skip
    rounds = int(resolved(setting.shared)["num-server-rounds"])
    lines = []
    total = 0
    for algorithm, space in spaces.items():
        trials = args.trials if args.search == "optuna" else len(grid_points(space))
        total += trials * len(setting.seeds)
        lines.append(f"  {algorithm}: {trials} trials over {', '.join(space)}")
        if args.search == "grid":
            jobs = [j for p in grid_points(space) for j in setting.jobs(algorithm, p)]
            lines[-1] += f" ({sum(1 for j in jobs if reusable(j))} of {len(jobs)} runs ended earlier)"
    finals = len(spaces) * len(final_seeds)
    print(
        f"tune: {args.search} search, {total} search runs ({len(setting.seeds)} seeds each) + {finals} final "
        f"runs = {(total + finals) * rounds} rounds ({rounds} per run), scored by {setting.column}",
        flush=True,
    )
    print("\n".join(lines), flush=True)
    overridden = sorted(set(setting.shared) & {k for space in spaces.values() for k in space})
    if overridden:
        print(f"  note: -c {', '.join(overridden)} is replaced by the searched values", flush=True)


def tune(algorithms: list[str], spaces: dict, setting: Setting, args: argparse.Namespace) -> dict[str, list[Trial]]:
    if args.search == "grid":
        return grid_search(setting, spaces)
    return {a: optuna_search(setting, a, spaces[a], args.trials, args.sampler_seed) for a in algorithms}


def summary_markdown(results: Mapping[str, list[Trial]], best: Mapping[str, Trial | None], setting: Setting,
                     command: str, final_text: str) -> str:  # fmt: skip
    head = ["algorithm", "chosen values", f"validation score ({setting.column})", "trials with a score"]
    cells = []
    for algorithm, trials in results.items():
        pick = best[algorithm]
        values = ", ".join(f"{k}={v}" for k, v in pick.point) if pick else "none: no trial completed"
        cells.append([algorithm, values, report.fmt(pick.score if pick else None, ".4f"),
                      f"{sum(1 for t in trials if t.score is not None)}/{len(trials)}"])  # fmt: skip
    lines = [f"Reproduce: `{command}`", "", "## Chosen on the validation split", "",
             *report.markdown_table(head, cells), "", "## Final runs (test accuracy, no validation split)", "",
             final_text.partition("\n\n")[2] if final_text.startswith("Reproduce:") else "No final runs."]  # fmt: skip
    return "\n".join(lines) + "\n"


def outputs(out: Path, algorithms: Sequence[str]) -> list[Path]:
    """The files a tuning writes in <out> besides the runs: search tables, tuned.toml, the final report, tune.md."""
    search = [out / "search" / f"{a}.{ext}" for a in algorithms for ext in ("md", "csv")]
    return [*search, out / "tuned.toml", *sweep.outputs(out / "final"), out / "tune.md"]


@dataclass
class Plan:
    """A tuning, checked: its arguments, algorithms and their search spaces, the search and the final runs'
    settings, the final seeds, and where it writes."""

    args: argparse.Namespace
    algorithms: list[str]
    spaces: dict[str, dict[str, Search]]
    setting: Setting
    final: dict
    final_seeds: list[int]
    out: Path


@dataclass
class TuningResult:
    """What a tuning found: every algorithm's trials and chosen one, the chosen values, the final runs."""

    trials: dict[str, list[Trial]]
    best: dict[str, Trial | None]
    values: dict[str, dict]
    outcomes: list
    final_text: str


class Tuning(Study):
    module = "simulation.tune"
    run_errors = (TuneError,)  # a search that cannot be scored (no validation column): one line, exit 2

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_arguments(parser)

    def answer_at_once(self, args: argparse.Namespace) -> int | None:
        if not args.list:
            return None
        print(tunable_table())
        return 0

    def plan(self, args: argparse.Namespace) -> Plan:
        algorithms, spaces, setting, final, final_seeds = plan(args)
        preflight(resolved(setting.shared))
        return Plan(args, algorithms, spaces, setting, final, final_seeds, Path(args.out).resolve())

    def announce(self, plan: Plan) -> int | None:
        print_plan(plan.spaces, plan.setting, plan.args, plan.final_seeds)
        return 0 if plan.args.dry_run else None

    def outputs(self, plan: Plan) -> list[Path]:
        return outputs(plan.out, plan.algorithms)

    def reproduce(self, plan: Plan) -> str:
        return _command(plan.args)

    def run(self, plan: Plan) -> TuningResult:
        """Search, write each algorithm's trials and tuned.toml, run the chosen values on the final seeds."""
        logging.getLogger("optuna").setLevel(logging.WARNING)
        setting, out, command = plan.setting, plan.out, self.reproduce(plan)
        results = tune(plan.algorithms, plan.spaces, setting, plan.args)
        best = {a: chosen(trials, setting.maximize) for a, trials in results.items()}
        for algorithm, trials in results.items():
            write_search(setting.out, algorithm, trials, best[algorithm], setting.column, setting.last)
        values = {a: dict(t.point) for a, t in best.items() if t is not None}
        score = f"score: mean {setting.column} over the last {setting.last} evaluations, seeds {plan.args.seeds}"
        tuned_file.write(out / "tuned.toml", values, [f"chosen by: {command}", score])
        outcomes, final_text = run_finals(plan, values, command)
        return TuningResult(results, best, values, outcomes, final_text)

    def report(self, plan: Plan, tuned: TuningResult) -> str:
        text = summary_markdown(tuned.trials, tuned.best, plan.setting, self.reproduce(plan), tuned.final_text)
        (plan.out / "tune.md").write_text(text)
        return text

    def exit_code(self, plan: Plan, tuned: TuningResult, rerun: str) -> int:
        return 0 if len(tuned.values) == len(plan.algorithms) and all(o.completed for o in tuned.outcomes) else 1


def run_finals(plan: Plan, values: Mapping[str, dict], command: str) -> tuple[list, str]:
    """The chosen values on the final seeds (no validation split) and their sweep report: the outcomes and the
    report's text ("" without final runs)."""
    out, args = plan.out, plan.args
    final_jobs = [j for a, v in values.items()
                  for j in sweep.jobs_for([a], [tuple(v.items())], plan.final_seeds, plan.final, out / "final",
                                          group=stage_group(out / "final"))]  # fmt: skip
    if not final_jobs:
        return [], ""
    outcomes = run_jobs(final_jobs, args.engine, args.parallel, reuse=True)
    cfg = resolved(plan.final)
    title = args.title or f"{cfg['dataset']}, {cfg['num-clients']} clients, tuned"
    text = sweep.write_report(out / "final", sweep.aggregate(final_jobs, cfg.targets), cfg.targets, command, title)
    return outcomes, text


main = Tuning(__doc__).main


if __name__ == "__main__":
    sys.exit(main())
