"""Per-algorithm tuning on a validation split: every method gets its own step size and main hyper-parameter,
chosen without looking at the test set; then fresh seeds, trained on all the training data, report test accuracy.

    python -m simulation.tune --algorithms fedavg,fedcm,scaffold -c "num-server-rounds=100 partition-alpha=0.1" \\
        --seeds 0,1 --final-seeds 10,11,12 --out results/tune --engine inprocess --parallel 2
    python -m simulation.tune --algorithms fedavg,fedcm --budget 8 ...   # 8 distinct points each (TPE or grid)
    python -m simulation.tune --list                                     # what each algorithm searches

What is searched is the registry's `tunable` declaration of each algorithm (fedsuite/registry/known.py; `--space`
replaces or adds keys). `--search grid` tries every combination of the declared values (a log range gives its
grid points); `--budget N` (an Optuna search) gives every algorithm N distinct points: its whole grid when that has
no more than N points, else N points proposed by Optuna's TPE sampler, seeded by --sampler-seed (a repeated
proposal costs nothing; simulation/tuning/budget.py). `--search optuna --trials N` is the older form: N TPE
proposals, repeats included, so algorithms may see different numbers of points. Either way --parallel K points are
asked at a time, and the same command proposes the same points. Every trial runs once per search seed with
`validation-fraction` (0.1 unless -c sets it) and is scored by the validation accuracy only (rounds.jsonl
`val_accuracy`, or `fed_val_accuracy` under evaluation='federated'; `--score loss` reads the validation loss),
the mean over the last --last evaluations, averaged over the seeds. A trial with a seed that failed or diverged
keeps that status and has no score; it is never chosen.

Outputs in --out: search/<algorithm>.csv and .md (every trial: its values, per-seed scores, mean, status),
search/runs/… (the trial runs), tuned.toml (the chosen values; fedsuite.config.tuned reads it), final/ (the chosen
values on --final-seeds with validation-fraction=0: final/sweep.md, sweep.csv, sweep.png in simulation.sweep's format,
with the paired differences against --baseline (fedavg by default, when it is tuned) in sweep-paired.csv) and tune.md
(chosen values, validation scores, the final table). Every run goes through simulation.experiment: a stopped tuning
resumes where it stopped (completed and diverged runs are reused), --parallel K runs K at once. Exit 0 when every
algorithm got tuned values and every final run completed, 1 otherwise, 2 for bad settings.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fedsuite.config import tuned as tuned_file
from fedsuite.config.run_config import ConfigError
from fedsuite.config.tunable import Search, space_size
from fedsuite.evaluation.data_checks import check_evaluation_data
from simulation import sweep
from simulation.experiment import paired
from simulation.experiment.client_state import check_folders
from simulation.experiment.engines import ENGINE_HELP, ENGINES
from simulation.experiment.flags import SET_BY_STUDY, Repeatable, parse_list, refuse_study_keys
from simulation.experiment.fresh_runs import refuse_resume
from simulation.experiment.jobs import resolved, reusable
from simulation.experiment.jobs import validate as validate_jobs
from simulation.experiment.report import write_text
from simulation.experiment.runner import run_jobs
from simulation.experiment.study import Study
from simulation.launcher.overrides import parse_overrides
from simulation.launcher.preflight import preflight
from simulation.tuning.budget import budget_search, distinct_points
from simulation.tuning.outputs import final_settings, outputs, summary_markdown, write_search
from simulation.tuning.pruning import PRUNERS, MedianPruning, check_prunable, compute_line
from simulation.tuning.space import (
    DEFAULT_VALIDATION_FRACTION,
    SCORES,
    SEARCHES,
    TuneError,
    grid_points,
    parse_space,
    spaces_for,
    tunable_table,
)
from simulation.tuning.trials import (
    Setting,
    Trial,
    chosen,
    grid_search,
    optuna_search,
    run_trials,
    score_column,
    stage_group,
)

TUNE_SETS = {**SET_BY_STUDY, "seed": "--seeds (the search) and --final-seeds"}  # the keys a tuning sets per run

# --- the command ----------------------------------------------------------------------------------------------------


def _seeds(text: str, flag: str) -> list[int]:
    try:
        seeds = parse_list(text, flag, int)  # a seed given twice is refused, naming it
    except ConfigError as err:
        raise TuneError(str(err)) from None
    if min(seeds) < 0:
        raise TuneError(f"{flag} {text!r}: seed {min(seeds)} is negative; seeds are >= 0")
    return seeds


def _final_seeds(text: str) -> list[int]:
    """--final-seeds: the seeds, or none (no final runs), which goes alone."""
    items = [item.strip().lower() for item in text.split(",")]
    if "none" not in items:
        return _seeds(text, "--final-seeds")
    if len(items) > 1:
        raise TuneError(f"--final-seeds {text!r}: none (no final runs) goes alone, without seeds")
    return []


def _command(args: argparse.Namespace) -> str:
    parts = ["python -m simulation.tune", f"--algorithms {args.algorithms}", f"--seeds {args.seeds}",
             f"--search {args.search}"]  # fmt: skip
    if args.budget is not None:
        parts.append(f"--budget {args.budget} --sampler-seed {args.sampler_seed}")
    elif args.search == "optuna":
        parts.append(f"--trials {args.trials} --sampler-seed {args.sampler_seed}")
    if args.space:
        parts.append(f'--space "{args.space}"')
    if args.score != "accuracy" or args.last != 3:
        parts.append(f"--score {args.score} --last {args.last}")
    if args.prune != "off":
        parts.append(f"--prune {args.prune}")
    parts += [f'-c "{c}"' for c in args.run_config]
    parts += [f"--final-seeds {args.final_seeds}", f"--engine {args.engine}"]
    if args.baseline:
        parts.append(f"--baseline {args.baseline}")
    if args.parallel > 1:  # an Optuna search asks K trials at a time: K is part of what it proposes
        parts.append(f"--parallel {args.parallel}")
    return " ".join([*parts, f"--out {args.out}"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The tuning's flags."""
    parser.add_argument("--algorithms", action=Repeatable, help="comma-separated registered algorithms")
    parser.add_argument("-c", "--run-config", action="append", default=[], help="shared key=value overrides")
    parser.add_argument("--seeds", default="0,1", action=Repeatable,
                        help="search seeds: every trial runs once per seed")  # fmt: skip
    parser.add_argument("--search", choices=SEARCHES, default=None,
                        help="grid (default) or optuna (the default with --budget)")  # fmt: skip
    parser.add_argument("--budget", type=int, default=None,
                        help="distinct points per algorithm, the same for all (an Optuna search; a space with no "
                             "more points is searched whole)")  # fmt: skip
    parser.add_argument("--trials", type=int, default=0,
                        help="--search optuna: TPE proposals per algorithm, repeats included (--budget counts "
                             "distinct points)")  # fmt: skip
    parser.add_argument("--sampler-seed", type=int, default=0, help="--search optuna: the TPE sampler's seed")
    parser.add_argument("--space", default="", action=Repeatable, separator=" ",
                        help='replace or add searched values: "lr=0.01,0.1 fedcm:fedcm-alpha=0.1,0.3"')  # fmt: skip
    parser.add_argument("--score", choices=SCORES, default="accuracy",
                        help="validation accuracy (higher is better) or validation loss (lower)")  # fmt: skip
    parser.add_argument("--last", type=int, default=3, help="evaluations averaged into a run's score")
    parser.add_argument("--prune", choices=PRUNERS, default="off",
                        help="median: stop a trial's runs that fall behind the median of the completed trials "
                             "before them at an evaluated round (docs/running/tuning.md#pruning)")  # fmt: skip
    parser.add_argument("--final-seeds", default="10,11,12", action=Repeatable,
                        help="seeds of the final runs; none = no final runs")  # fmt: skip
    parser.add_argument("--baseline", help="the algorithm the final runs of the others are compared with, seed by "
                        "seed (default: fedavg when it is among --algorithms)")  # fmt: skip
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
    _check_search(args)
    if args.parallel < 1 or args.last < 1:
        raise TuneError("--parallel and --last: must be >= 1")
    seeds = _seeds(args.seeds, "--seeds")
    final_seeds = _final_seeds(args.final_seeds)
    if overlap := sorted(set(seeds) & set(final_seeds)):
        raise TuneError(f"--final-seeds {args.final_seeds}: seed {overlap[0]} is also a search seed; the final runs "
                        "need fresh seeds")  # fmt: skip
    shared = parse_overrides(args.run_config)
    refuse_resume(shared, "simulation.tune", "")
    try:
        refuse_study_keys(shared, "-c", "simulation.tune", TUNE_SETS)
    except ConfigError as err:
        raise TuneError(str(err)) from None
    if shared.get("validation-fraction", DEFAULT_VALIDATION_FRACTION) == 0:
        raise TuneError("validation-fraction=0: tuning scores trials on a validation split; give a value in (0, 1) "
                        f"or leave it out ({DEFAULT_VALIDATION_FRACTION})")  # fmt: skip
    search_shared = {"validation-fraction": DEFAULT_VALIDATION_FRACTION, **shared}
    try:
        paired.choose_baseline(algorithms, args.baseline)  # a --baseline not among them: exit 2 before any run
    except ConfigError as err:
        raise TuneError(str(err)) from None
    spaces = spaces_for(algorithms, parse_space(args.space))
    if args.budget is not None:
        _check_budget(args.budget, spaces)
    cfg = resolved(search_shared)
    check_prunable(cfg, args.prune)
    out = Path(args.out).resolve()
    column = score_column(str(cfg["evaluation"]), args.score)
    setting = Setting(search_shared, seeds, out / "search", args.engine, args.parallel, column, args.last,
                      args.score == "accuracy")  # fmt: skip
    # every grid point of every algorithm (an Optuna search draws inside the same ranges), and the final runs
    search = [j for a, space in spaces.items() for p in grid_points(space) for j in setting.jobs(a, p)]
    configs = validate_jobs(search)
    check_evaluation_data(configs[0])  # a validation split empty for every client: refused before any run
    try:
        check_folders(search if args.search == "grid" else [])  # no run's client-state folder holds another's
    except ConfigError as err:
        raise TuneError(str(err)) from None
    final = final_settings(shared)
    validate_jobs([j for a, space in spaces.items() for j in sweep.jobs_for([a], grid_points(space)[:1], final_seeds,
                                                                            final, out / "final")])  # fmt: skip
    return algorithms, spaces, setting, final, final_seeds


def _check_search(args: argparse.Namespace) -> None:
    """--search, --budget and --trials agree (an omitted --search is grid, or optuna with --budget)."""
    if args.budget is not None:
        if args.search == "grid":
            raise TuneError(f"--budget {args.budget}: a grid search tries every point; use --search optuna with "
                            "--budget, or leave out --search")  # fmt: skip
        if args.trials:
            raise TuneError(f"--budget {args.budget} and --trials {args.trials}: give one; --budget N gives "
                            "every algorithm N distinct points, --trials N counts TPE proposals, repeats "
                            "included")  # fmt: skip
        if args.budget < 1:
            raise TuneError(f"--budget {args.budget}: give N >= 1 distinct points per algorithm")
        args.search = "optuna"
    args.search = args.search or "grid"
    if args.search == "optuna" and args.budget is None and args.trials < 1:
        raise TuneError("--search optuna: give --budget N (distinct points per algorithm) or --trials N (N >= 1)")


def _check_budget(budget: int, spaces: Mapping[str, Mapping[str, Search]]) -> None:
    """A budget that some algorithm can spend: one larger than every space would only repeat the grid search."""
    sizes = {algorithm: space_size(space) for algorithm, space in spaces.items()}
    largest = max(sizes, key=sizes.get)
    if budget > sizes[largest]:
        raise TuneError(f"--budget {budget}: larger than every algorithm's space ({largest} has the most, "
                        f"{sizes[largest]} points), so it can never be spent; use --search grid (every point) or "
                        f"--budget {sizes[largest]} or less")  # fmt: skip


def print_plan(spaces: Mapping[str, Mapping[str, Search]], setting: Setting, args: argparse.Namespace,
               final_seeds: list[int]) -> None:  # fmt: skip
    rounds = int(resolved(setting.shared)["num-server-rounds"])
    lines = []
    total = 0
    for algorithm, space in spaces.items():
        size, keys = space_size(space), ", ".join(space)
        if args.budget is not None:
            trials = distinct_points(size, args.budget)
            how = "the full grid" if trials == size else "proposed by TPE"
            lines.append(f"  {algorithm}: {trials} distinct points of a space of {size} ({how}), over {keys}")
        elif args.search == "optuna":
            trials = args.trials
            lines.append(f"  {algorithm}: {trials} trials over {keys} (its grid has {size} points; TPE may repeat "
                         "a point, so the distinct points are not fixed: --budget fixes them)")  # fmt: skip
        else:
            trials = size
            lines.append(f"  {algorithm}: {trials} trials, the full grid of {size} points, over {keys}")
        total += trials * len(setting.seeds)
        if args.search == "grid":
            jobs = [j for p in grid_points(space) for j in setting.jobs(algorithm, p)]
            lines[-1] += f" ({sum(1 for j in jobs if reusable(j))} of {len(jobs)} runs ended earlier)"
    finals = len(spaces) * len(final_seeds)
    search = f"{args.search} search" if args.budget is None else f"optuna search of {args.budget} distinct points"
    pruned = "" if args.prune == "off" else f"; --prune {args.prune}: runs behind the completed trials' median stop"
    print(
        f"tune: {search}, {total} search runs ({len(setting.seeds)} seeds each) + {finals} final "
        f"runs = {(total + finals) * rounds} rounds at most ({rounds} per run), scored by {setting.column}{pruned}",
        flush=True,
    )
    print("\n".join(lines), flush=True)
    overridden = sorted(set(setting.shared) & {k for space in spaces.values() for k in space})
    if overridden:
        print(f"  note: -c {', '.join(overridden)} is replaced by the searched values", flush=True)


def tune(algorithms: list[str], spaces: dict, setting: Setting, args: argparse.Namespace) -> dict[str, list[Trial]]:
    pruning = MedianPruning(int(resolved(setting.shared)["num-server-rounds"])) if args.prune == "median" else None
    run = pruning or run_trials
    if args.search == "grid":
        return grid_search(setting, spaces, pruning)
    if args.budget is not None:
        return {a: budget_search(setting, a, spaces[a], args.budget, args.sampler_seed, run) for a in algorithms}
    return {a: optuna_search(setting, a, spaces[a], args.trials, args.sampler_seed, run) for a in algorithms}


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
        # a grid or --budget search draws from the grid points; --trials draws a log range's values between its ends
        on_grid = plan.args.search == "grid" or plan.args.budget is not None
        sizes = {a: space_size(space) for a, space in plan.spaces.items()} if on_grid else None
        compute = compute_line(tuned.trials) if plan.args.prune != "off" else None
        text = summary_markdown(tuned.trials, tuned.best, plan.setting, self.reproduce(plan), tuned.final_text, sizes,
                                compute)  # fmt: skip
        write_text(plan.out / "tune.md", text)
        return text

    def exit_code(self, plan: Plan, tuned: TuningResult, rerun: str) -> int:
        return 0 if len(tuned.values) == len(plan.algorithms) and all(o.completed for o in tuned.outcomes) else 1


def run_finals(plan: Plan, values: Mapping[str, dict], command: str) -> tuple[list, str]:
    """The chosen values on the final seeds (no validation split) and their sweep report: the outcomes and the
    report's text ("" without final runs)."""
    out, args = plan.out, plan.args
    final_jobs = [j for a, v in values.items()
                  for j in sweep.jobs_for([a], [tuple(v.items())], plan.final_seeds, plan.final, out / "final",
                                          group=stage_group(out / "final"), state_base=out)]  # fmt: skip
    if not final_jobs:
        return [], ""
    outcomes = run_jobs(final_jobs, args.engine, args.parallel, reuse=True)
    cfg = resolved(plan.final)
    title = args.title or f"{cfg['dataset']}, {cfg['num-clients']} clients, tuned"
    text = sweep.write_report(out / "final", sweep.aggregate(final_jobs, cfg.targets), cfg.targets, command, title,
                              args.baseline)  # fmt: skip
    return outcomes, text


main = Tuning(__doc__).main


if __name__ == "__main__":
    sys.exit(main())
