"""A study's flags: comma-separated lists, a grid of run-config values, and the command line that reruns it."""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from fedsuite.config import ConfigError
from simulation.launcher.overrides import parse_overrides


def parse_list(text: str, flag: str, kind: Callable[[str], Any] = str) -> list:
    """A comma-separated flag value (`--seeds 0,1,2`, `--algorithms fedavg,scaffold`) → its items, each once: an item
    given twice would run the same run twice into one folder (and count it twice), so it is a ConfigError naming
    the flag and the item."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        values = [kind(item) for item in items]
    except ValueError:
        what = "integers such as 0,1,2" if kind is int else f"{kind.__name__} values"
        raise ConfigError(f"{flag} {text!r}: expected comma-separated {what}") from None
    if not values:
        raise ConfigError(f"{flag} {text!r}: give at least one")
    seen = set()
    for item, value in zip(items, values, strict=True):
        if value in seen:
            raise ConfigError(f"{flag} {text!r}: {item} is given twice; give each once")
        seen.add(value)
    return values


def shell_command(module: str, argv: Sequence[str]) -> str:
    """`python -m <module> <argv>` as one line a POSIX shell runs as given: an argument with single quotes (a -c
    with TOML strings) in double quotes where that needs no escapes, else shlex's quoting."""

    def quoted(arg: str) -> str:
        if shlex.quote(arg) == arg or any(c in arg for c in '"$`\\!'):
            return shlex.quote(arg)
        return f'"{arg}"'

    return " ".join(["python", "-m", module, *map(quoted, argv)])


def parse_value(flag: str, key: str, text: str) -> object:
    """One TOML value of a study flag (`--grid`, `--space`); a bad one is a ConfigError naming the flag."""
    try:
        return parse_overrides([f"{key}={text}"])[key]
    except ConfigError:
        raise ConfigError(f"{flag} {key}={text!r}: not a TOML value; write numbers as they are, true/false, "
                          f"strings in quotes ({key}='{text}')") from None  # fmt: skip


def parse_grid(text: str) -> list[tuple[tuple[str, object], ...]]:
    """`"lr=0.01,0.05 local-epochs=2,5"` → the cartesian product of (key, value) pairs (TOML values); a key or a
    value given twice is a ConfigError (the same runs twice)."""
    axes, keys = [], set()
    for item in text.split():
        key, sep, values = item.partition("=")
        if not sep or not values or not key:
            raise ConfigError(f"--grid {item!r}: write key=value1,value2")
        if key in keys:
            raise ConfigError(f"--grid: {key} is given twice; give its values once (key=value1,value2)")
        keys.add(key)
        axis = [parse_value("--grid", key, v) for v in values.split(",")]
        for i, value in enumerate(axis):
            if any(value == other and type(value) is type(other) for other in axis[:i]):
                raise ConfigError(f"--grid {item!r}: {values.split(',')[i]} is given twice; give each once")
        axes.append([(key, v) for v in axis])
    return [tuple(p) for p in itertools.product(*axes)] if axes else [()]


def grid_tag(point: tuple[tuple[str, object], ...]) -> str:
    """A grid point's folder name: `lr=0.05_local-epochs=2`, or `default` for the empty point. A list value's commas
    become '-' (`fedmim-alphas=0.3-0.1`): Flower's app bundle cannot hold a path with a comma, and a results folder
    may lie inside the project (docs/)."""
    return "_".join(f"{k}={v}".replace(",", "-") for k, v in point) or "default"
