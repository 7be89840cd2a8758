"""What a tuning searches: each algorithm's declared tunable keys (fedsuite/config/tunable.py), replaced or extended by
`--space`, as grid points or an Optuna space."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from fedsuite.config.run_config import ConfigError, Scalar, active_schema
from fedsuite.config.tunable import Search, describe, grid_values, problem, space_size
from simulation.experiment import report
from simulation.experiment.flags import parse_value

SEARCHES = ("grid", "optuna")
SCORES = ("accuracy", "loss")
DEFAULT_VALIDATION_FRACTION = 0.1
Point = tuple[tuple[str, Scalar], ...]  # one trial's values, in the space's key order


class TuneError(ConfigError):
    """A tuning setting that cannot work (one line naming the flag or key)."""


# --- what is searched -----------------------------------------------------------------------------------------------


def search_space(algorithm: str, replaced: Mapping[str, tuple[Scalar, ...]] | None = None) -> dict[str, Search]:
    """The algorithm's declared tunable keys, with `replaced` keys' values replacing (or adding to) them; every
    value checked against its key's schema range."""
    from fedsuite.registry.known import ALGORITHMS

    if algorithm not in ALGORITHMS:
        raise TuneError(f"--algorithms {algorithm!r}: allowed are {', '.join(ALGORITHMS)}")
    space: dict[str, Search] = {**ALGORITHMS[algorithm].tunable, **(replaced or {})}
    if not space:
        raise TuneError(f"algorithm {algorithm!r} declares no tunable keys (Algorithm.tunable); give them with "
                        "--space 'lr=0.01,0.1'")  # fmt: skip
    schema = active_schema()
    for key, search in space.items():
        if key in schema and not schema[key].tunable:  # keys a tuning sets itself (the run's identity, the seeds,
            # where it writes, the validation split it is scored on) and a plug-in's keys tagged tunable=False
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
    from fedsuite.registry.known import ALGORITHMS

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
    """Markdown tables of what every registered algorithm searches and how many points its space has (`--list`)."""
    from fedsuite.registry.known import ALGORITHMS

    schema = active_schema()
    rows = []
    for name, algorithm in ALGORITHMS.items():
        for key, search in algorithm.tunable.items():
            default = schema[key].default if key in schema else "?"
            rows.append([f"`{name}`", f"`{key}`", describe(search), f"`{default}`"])
        if not algorithm.tunable:
            rows.append([f"`{name}`", "—", "declares none (give --space)", ""])
    sizes = [[f"`{name}`", str(space_size(algorithm.tunable)) if algorithm.tunable else "—"]
             for name, algorithm in ALGORITHMS.items()]  # fmt: skip
    return "\n".join([*report.markdown_table(["algorithm", "key", "searched", "default"], rows), "",
                      "Space sizes (grid points; a log range counts its grid points): what a grid search tries, and "
                      "the most distinct points --budget can give.", "",
                      *report.markdown_table(["algorithm", "points"], sizes)])  # fmt: skip
