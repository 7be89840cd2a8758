"""Typed settings: frozen dataclasses whose fields each hold one run-config key, read once from a resolved config.

The schema (fedsuite/config/schema.py) is the only place a default is written, and a settings object reads its defaults
from there too: built from a mapping that lacks a key (a plan built by hand, or a config check's values, where a
key that failed its own check is left out) the field holds the key's schema default, and so does a field the
constructor is not given. `fedsuite.config.run_config.Config` carries one
object per group (`cfg.local`, `cfg.systems`, `cfg.secagg`, …); the modules that own a group declare it beside the
code that reads it (fedsuite/systems/, fedsuite/privacy/, fedsuite/server/pruning.py). A single key read outside a group
is `value_of(values, key)`, never `values.get(key, <a default written again>)`.

No torch, no Flower; nothing of fedsuite but the schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field, fields
from functools import cache
from typing import Any, Self, get_type_hints

from fedsuite.config import schema


def schema_default(key: str) -> Any:
    """The default the schema declares for run-config `key`, one of the common keys (fedsuite/config/schema.py); an
    algorithm's own keys are read from a resolved config, which holds every one of them."""
    return schema.COMMON_SCHEMA[key].default


def value_of(values: Mapping[str, Any], key: str) -> Any:
    """Common run-config `key` in `values`, or its schema default when `values` lacks it."""
    return values[key] if key in values else schema_default(key)


def setting(key: str, parse: Callable[[Any], Any] | None = None) -> Any:
    """A settings field holding run-config key `key`, converted by `parse` (default: the field's own type); left
    out of the constructor, it holds the key's schema default (converted by `parse`)."""

    def default() -> Any:
        value = schema_default(key)
        return value if parse is None else parse(value)

    return field(default_factory=default, metadata={"key": key, "parse": parse})


class Settings:
    """Base of the typed settings objects: frozen dataclasses whose fields name their run-config key."""

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Field name → the run-config key it holds."""
        return {f.name: f.metadata["key"] for f in fields(cls)}

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Self:
        """The settings read from validated run-config values (a Config or resolve's dict); a key `values` lacks
        is its schema default."""
        return cls(**{name: parse(values[key]) for name, key, parse in _readers(cls) if key in values})


@cache
def _readers(cls: type[Settings]) -> tuple[tuple[str, str, Callable[[Any], Any]], ...]:
    """(field name, run-config key, converter) of each field of `cls`."""
    types = get_type_hints(cls)
    return tuple((f.name, f.metadata["key"], f.metadata["parse"] or types[f.name]) for f in fields(cls))
