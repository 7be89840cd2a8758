"""What a tuning search may try for one run-config key: a log range or a list of values.

An algorithm declares its tunable keys in the registry (`Algorithm.tunable`, fedsuite/registry/entry.py), e.g.
`{"lr": LogRange(0.005, 0.5), "fedcm-alpha": (0.05, 0.1, 0.2, 0.5)}`. A grid search tries the declared values
(a log range's `points` geometric points); an Optuna search with `--trials` (simulation/tune.py) draws from the
log range and picks among listed values; one with `--budget` picks among the grid points of both. Every value a
search can produce must pass the key's own schema check; `problem` says which does not. This module is light (no
torch, no Optuna): config validation may import the registry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fedsuite.config.schema import Key, Scalar

SIGNIFICANT_DIGITS = 3  # grid points and drawn values are rounded to this many digits (readable folder names)


def rounded(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """`value` to `digits` significant digits (0.0158113… → 0.0158)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


@dataclass(frozen=True)
class LogRange:
    """Positive numbers from `low` to `high` on a log scale; a grid takes `points` geometric points, both ends
    included."""

    low: float
    high: float
    points: int = 5

    def __post_init__(self) -> None:
        if not (0 < self.low < self.high and math.isfinite(self.high)):
            raise ValueError(f"LogRange({self.low}, {self.high}): need 0 < low < high")
        if self.points < 2:
            raise ValueError(f"LogRange points={self.points}: need at least 2")

    def grid(self) -> tuple[float, ...]:
        ratio = math.log(self.high / self.low) / (self.points - 1)
        return tuple(rounded(self.low * math.exp(ratio * i)) for i in range(self.points))

    def __str__(self) -> str:
        return f"log {self.low:g} … {self.high:g} (grid {', '.join(f'{v:g}' for v in self.grid())})"


Search = LogRange | tuple[Scalar, ...]


def grid_values(search: Search) -> tuple[Scalar, ...]:
    """The values a grid search tries for one key."""
    return search.grid() if isinstance(search, LogRange) else tuple(search)


def space_size(space: Mapping[str, Search]) -> int:
    """How many points a search space has: the product of its keys' value counts, a log range counting its grid
    points (what a grid search tries, and what a budgeted search draws from)."""
    return math.prod(len(grid_values(search)) for search in space.values())


def describe(search: Search) -> str:
    """One cell of the tunable-keys table: the range, or the listed values."""
    if isinstance(search, LogRange):
        return str(search)
    return ", ".join(f"{v:g}" if isinstance(v, float) else f"'{v}'" if isinstance(v, str) else str(v) for v in search)


def problem(name: str, search: object, key: Key | None) -> str | None:
    """Why `search` is not a valid search for run-config key `name` (its schema declaration `key`), or None."""
    if key is None:
        return f"tunable key {name!r}: not a run-config key"
    if isinstance(search, LogRange):
        values: tuple = (search.low, search.high, *search.grid())
    elif isinstance(search, tuple) and search:
        values = search
    else:
        return f"tunable key {name!r}: expected a LogRange or a non-empty tuple of values, got {search!r}"
    for value in values:
        _, error = key.check(value)
        if error is not None:
            return f"tunable key {name!r}: {describe(search)} leaves the schema's range ({error})"
    return None
