"""A study's flags: comma-separated lists (a list flag may be given more than once), a grid of run-config values,
the run-config keys a study sets itself, and the command line that reruns it."""

from __future__ import annotations

import argparse
import itertools
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fedsuite.config.run_config import ConfigError, active_schema
from simulation.launcher.overrides import parse_overrides

# The run-config keys a study sets for every run itself, and the flag that sets them instead (a -c or --grid value
# of one would be replaced, run after run, while the report named it)
RUN_FOLDER = "--out (the study names each run's folder)"
SET_BY_STUDY = {"algorithm": "--algorithms", "seed": "--seeds", "out-dir": RUN_FOLDER, "run-name": RUN_FOLDER,
                "overwrite": RUN_FOLDER}  # fmt: skip


class Repeatable(argparse.Action):
    """A list flag that may be given more than once (`--seeds 0,1 --seeds 2`, `--grid "lr=0.1" --grid "…"`): the
    values of every occurrence are joined with `separator`, as if given once, so none is dropped silently and one
    given twice is still refused."""

    def __init__(self, option_strings, dest, separator: str = ",", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.separator = separator

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_repeatable_given", set())
        earlier = getattr(namespace, self.dest) if self.dest in given else None
        given.add(self.dest)
        setattr(namespace, self.dest, values if earlier is None else f"{earlier}{self.separator}{values}")


def refuse_study_keys(keys: Iterable[str], flag: str, study: str, sets: Mapping[str, str] = SET_BY_STUDY) -> None:
    """ConfigError naming the first of `keys` (given with `flag`: -c or --grid) that `study` sets for every run
    itself (`sets`: key → the flag that sets it)."""
    for key in keys:
        if key in sets:
            raise ConfigError(f"{flag} {key}: {study} sets {key} for every run itself; use {sets[key]}")


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


def as_run(key: str, value: object) -> object:
    """`value` as a run of `key` takes it (the schema's conversion: lr=1 runs as 1.0), to tell values that run the
    same setting; unchanged for a key the schema does not know or a value it refuses (resolve names that one)."""
    known = active_schema().get(key)
    if known is None:
        return value
    converted, problem = known.check(value)
    return value if problem else converted


def parse_grid(text: str) -> list[tuple[tuple[str, object], ...]]:
    """`"lr=0.01,0.05 local-epochs=2,5"` → the cartesian product of (key, value) pairs (TOML values); a key given
    twice, or two values that run the same setting (0.05 and 0.050, 1 and 1.0 for a number key), are a ConfigError
    (the same runs twice)."""
    axes, keys = [], set()
    for item in text.split():
        key, sep, values = item.partition("=")
        if not sep or not values or not key:
            raise ConfigError(f"--grid {item!r}: write key=value1,value2")
        if key in keys:
            raise ConfigError(f"--grid: {key} is given twice; give its values once (key=value1,value2)")
        keys.add(key)
        texts = values.split(",")
        axis = [parse_value("--grid", key, v) for v in texts]
        runs = [as_run(key, v) for v in axis]
        for i, value in enumerate(runs):
            same = next((j for j, other in enumerate(runs[:i]) if value == other and type(value) is type(other)), None)
            if same is not None and texts[same] == texts[i]:
                raise ConfigError(f"--grid {item!r}: {texts[i]} is given twice; give each once")
            if same is not None:
                raise ConfigError(f"--grid {item!r}: {texts[same]} and {texts[i]} are the same {key} ({value!r}) "
                                  "and would run the same runs twice; give each once")  # fmt: skip
        axes.append([(key, v) for v in axis])
    return [tuple(p) for p in itertools.product(*axes)] if axes else [()]


def grid_tag(point: tuple[tuple[str, object], ...]) -> str:
    """A grid point's folder name: `lr=0.05_local-epochs=2`, or `default` for the empty point. A list value's commas
    become '-' (`fedmim-alphas=0.3-0.1`): Flower's app bundle cannot hold a path with a comma, and a results folder
    may lie inside the project (docs/)."""
    return "_".join(f"{k}={v}".replace(",", "-") for k, v in point) or "default"
