"""What a run-config key is, knowing no key: `Key` (default, type, range, allowed values and the tags the rest of
the suite reads) and its check, `ConfigError`, the `Scalar` values a key holds, the small parsers the keys use
(comma lists, plug-ins' key=value pairs), the near names of an unknown key, and why a plug-in's key cannot be
declared. The keys themselves are in fedsuite/config/schema.py (the common ones) and in the algorithms' registry
entries. Nothing here imports torch, Flower or another fedsuite module.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Scalar = bool | int | float | str


class ConfigError(ValueError):
    """A run-config value is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class Key:
    """One run-config key: its name, its default (whose type is the key's type), its help line, its allowed values
    or range, and the tags the rest of the suite reads (`check` converts and checks a given value)."""

    name: str
    default: Scalar
    help: str
    choices: tuple[str, ...] | None = None
    low: float | None = None  # inclusive lower bound
    high: float | None = None  # inclusive upper bound
    low_open: bool = False  # lower bound is strict (value > low)
    high_open: bool = False  # upper bound is strict (value < high)
    # tags: what the rest of the suite needs to know about the key, kept on the key (no list elsewhere)
    resumable: bool = False  # may differ between a run and its resumption: where things go, how long, how checked
    app: str | None = None  # fedsuite.app refuses it as a setting; this says what replaces it there
    client: bool = False  # fedsuite.app's clients read it from the settings they share with the server
    tunable: bool = True  # a tuning's --space may search it (not: what a tuning sets itself, e.g. seed, out-dir)

    def check(self, value: Any) -> tuple[Scalar | None, str | None]:
        """Return (converted value, None) or (None, error message)."""
        want = type(self.default)
        if want is bool:
            if not isinstance(value, bool):
                return None, f"{self.name}={value!r}: expected true or false"
        elif want is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return None, f"{self.name}={value!r}: expected an integer"
            if not -(2**63) <= value < 2**63:  # Flower carries run-config integers as signed 64-bit
                return None, f"{self.name}={value!r}: out of range (Flower's run config holds integers below 2**63)"
        elif want is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None, f"{self.name}={value!r}: expected a number"
            value = float(value)
            if not math.isfinite(value):
                return None, f"{self.name}={value!r}: expected a finite number"
        elif not isinstance(value, str):
            return None, f"{self.name}={value!r}: expected a string"
        if self.choices is not None and value not in self.choices:
            return None, f"{self.name}={value!r}: allowed values are {', '.join(self.choices)}"
        if not self.in_range(value):
            return None, f"{self.name}={value!r}: must be {self.range_text()}"
        return value, None

    def in_range(self, value: float) -> bool:
        """Whether `value` lies inside the key's declared bounds (every value does for a key without any)."""
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def range_text(self) -> str:
        """The whole allowed range in words, whichever bound a value violates: 'in (0, 1)' with two bounds,
        '> 0' or '<= 100' with one."""
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return "any number"


def float_list(text: str) -> tuple[float, ...]:
    return tuple(float(t) for t in text.split(",") if t.strip())


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def similar_keys(name: str, schema: Mapping[str, Key]) -> list[str]:
    """Keys an unknown `name` may have meant, closest first: the same words written with '-' (prox_mu → prox-mu,
    Prox-Mu) alone, else keys sharing its first word and near spellings, ordered by how alike they are spelt
    (difflib's ratio; ties in the schema's order)."""
    dashed = name.strip().lower().replace("_", "-").replace(" ", "-")
    if dashed in schema:
        return [dashed]
    first = dashed.split("-")[0]
    close = [k for k in schema if k.split("-")[0] == first]
    close += [k for k in difflib.get_close_matches(dashed, list(schema), n=3, cutoff=0.75) if k not in close]
    return sorted(close, key=lambda k: -_likeness(dashed, k))


def _likeness(written: str, key: str) -> float:
    """How alike two key names are spelt, in [0, 1] (1: the same)."""
    return difflib.SequenceMatcher(None, written, key).ratio()


_PAIR = re.compile(r"""\s*([^\s=]+)=("(?:[^"\\]|\\.)*"|'[^']*'|\[[^\]]*\]|\{[^}]*\}|[^\s"']+)(?=\s|$)""")


def parse_pairs(text: str) -> dict[str, Scalar]:
    """'k1=v1 k2="a b" k3='c'' with TOML values → {k1: v1, k2: 'a b', k3: 'c'}; ValueError naming what is wrong."""
    pairs: dict[str, Scalar] = {}
    position, text = 0, text.strip()
    while position < len(text):
        match = _PAIR.match(text, position)
        if match is None:
            raise ValueError(f"{text[position:].split()[0]!r} is not key=value")
        key, value = match.groups()
        if key in pairs:
            raise ValueError(f"{key!r} is given twice")
        try:
            pairs[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise ValueError(f"{key}={value}: the value is not TOML (strings in quotes)") from None
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    return pairs


def _allowed(key: Key) -> str:
    """A key's declared values in words: its choices, or its range."""
    if key.choices is not None:
        return f"values {', '.join(map(str, key.choices))}"
    if key.low is None and key.high is None:
        return f"any {type(key.default).__name__}"
    low = "(-inf" if key.low is None else f"{'(' if key.low_open else '['}{key.low:g}"
    high = "inf)" if key.high is None else f"{key.high:g}{')' if key.high_open else ']'}"
    return f"range {low}, {high}"


def default_refusal(key: Any) -> str | None:
    """Why a plug-in's run-config key cannot be declared, in one line, or None: not a fedsuite.config.run_config.Key,
    or a default its own check refuses (outside its range or choices), which would make every run fail."""
    if not isinstance(key, Key):
        return f"its keys hold a {type(key).__name__}, expected fedsuite.config.schema.Key"
    try:
        _, problem = key.check(key.default)
    except Exception as err:
        problem = f"its check raised {type(err).__name__}: {err}".splitlines()[0][:300]
    if problem is None:
        return None
    return (
        f"run-config key {key.name!r} declares the default {key.default!r} outside its declared "
        f"{_allowed(key)} ({problem}); declare a default inside it"
    )
