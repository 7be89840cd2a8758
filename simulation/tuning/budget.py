"""A budgeted search: the same number of distinct points for every algorithm (`--budget N`).

An algorithm whose space (fedsuite.config.tunable.space_size) has at most N points gets every point, its grid. A larger
space gets N distinct points proposed by Optuna's seeded TPE sampler, which picks among the grid points of each
key. A proposal of a point already tried costs no budget and runs nothing: Optuna is told that point's known score,
so TPE learns from it. After MAX_REPEATS such proposals in a row the next untried point in a seeded order is taken
instead (its trial says so), so a sampler that keeps repeating cannot stall the search. Same command, same scores:
same points.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence

from fedsuite.config.tunable import Search, grid_values
from simulation.tuning.space import Point, TuneError, grid_points
from simulation.tuning.trials import Runner, Setting, Trial, run_trials, tell

MAX_REPEATS = 10  # repeated proposals in a row before the next untried point is taken in the seeded order
GRID = "grid"  # the space has no more points than the budget: every point is tried
TPE = "TPE"


def seeded_origin() -> str:
    """What a trial taken from the seeded order says about itself."""
    return f"seeded order after {MAX_REPEATS} repeated proposals"


def distinct_points(space_size: int, budget: int) -> int:
    """How many distinct points an algorithm gets: its whole grid when that fits the budget, else the budget."""
    return min(space_size, budget)


def seeded_order(points: Sequence[Point], seed: int) -> list[Point]:
    """The grid points in an order drawn by `seed`: where the search goes when TPE keeps repeating itself."""
    return random.Random(seed).sample(list(points), len(points))


def budget_search(setting: Setting, algorithm: str, space: Mapping[str, Search], budget: int, sampler_seed: int,
                  run: Runner = run_trials) -> list[Trial]:  # fmt: skip
    """`budget` distinct points of one algorithm (all of them when its grid is no larger), numbered 1…; the
    points are asked --parallel at a time, and a proposal that repeats a point asked earlier is told that point's
    score (or failure) without running anything."""
    points = grid_points(space)
    if len(points) <= budget:
        return _marked(run(setting, algorithm, points, 1), GRID)
    try:
        import optuna
    except ImportError as err:
        raise TuneError("--search optuna needs the optuna package: pip install optuna") from err
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize" if setting.maximize else "minimize",
                                sampler=optuna.samplers.TPESampler(seed=sampler_seed))  # fmt: skip
    distributions = {key: optuna.distributions.CategoricalDistribution(grid_values(s)) for key, s in space.items()}
    untried = iter(seeded_order(points, sampler_seed))
    tried: dict[Point, Trial] = {}
    while len(tried) < budget:
        size = min(max(setting.parallel, 1), budget - len(tried))
        batch, waiting = _ask_batch(study, distributions, tried, untried, size)
        results = run(setting, algorithm, list(batch), len(tried) + 1)
        for (point, (asked, origin)), result in zip(batch.items(), results, strict=True):
            result.origin = origin
            tell(study, asked, result)
            tried[point] = result
        for asked, point in waiting:
            tell(study, asked, tried[point])
            tried[point].repeats += 1
    return list(tried.values())


def _ask_batch(study, distributions: Mapping, tried: dict[Point, Trial], untried: Iterator[Point], size: int
               ) -> tuple[dict[Point, tuple[object, str]], list[tuple[object, Point]]]:  # fmt: skip
    """`size` new points: {point: (its Optuna trial, what proposed it)}, and the proposals that repeated a point of
    this batch (told once it ran). A proposal of a point in `tried` is told its score at once; after MAX_REPEATS
    repeats in a row the next point of `untried` (the seeded order) not yet tried is taken."""
    batch: dict[Point, tuple[object, str]] = {}
    waiting: list[tuple[object, Point]] = []
    repeats = 0
    while len(batch) < size:
        if repeats >= MAX_REPEATS:
            point = next(p for p in untried if p not in tried and p not in batch)
            study.enqueue_trial(dict(point))
            batch[point] = (study.ask(distributions), seeded_origin())
            repeats = 0
            continue
        asked = study.ask(distributions)
        point = tuple((key, asked.params[key]) for key in distributions)
        if point in tried:
            tell(study, asked, tried[point])
            tried[point].repeats += 1
            repeats += 1
        elif point in batch:
            waiting.append((asked, point))
            repeats += 1
        else:
            batch[point] = (asked, TPE)
            repeats = 0
    return batch, waiting


def _marked(trials: list[Trial], origin: str) -> list[Trial]:
    for trial in trials:
        trial.origin = origin
    return trials
