"""Applying and showing the named run-config bundles of `preset=<name>` (the presets themselves, one per seed's
main result table, are data in fedsuite/config/preset_values.py; their names are handed on from here).

Two ways a preset is applied:
- `apply_preset` (fedsuite.config.run_config.resolve, i.e. the ServerApp/ClientApp): they only see Flower's merged run
  config, where a key equal to its default cannot be told from an unset one, so such a key cannot override the
  preset;
- `expand` (simulation.run/compare/sweep): they know which keys the user gave, so every one of them wins; they
  launch with every preset key written out and `preset-expanded=true`, so the apps do not apply it again.
Precedence: schema defaults < preset values < per-algorithm values < explicit keys.
`describe` prints a resolved config with where each value came from; `presets_table` is the preset table of
docs/running/presets.md. This module reads the registry's schema (fedsuite/registry/known.py);
fedsuite/config/run_config.py's `resolve` applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedsuite.config.keys import ConfigError, Scalar  # noqa: F401  (Scalar: handed on)
from fedsuite.config.preset_values import PRESET_NAMES, PRESETS, Preset  # noqa: F401  (Preset: handed on)
from fedsuite.config.settings import value_of
from fedsuite.registry.known import BUILT_IN_SCHEMA as SCHEMA
from fedsuite.registry.known import active_schema

# --- applying a preset -------------------------------------------------------------------------------------------


def preset_error(name: Any) -> str | None:
    """The error for an unknown `preset` value, or None (empty = no preset)."""
    if name == "" or (isinstance(name, str) and name in PRESETS):
        return None
    return f"preset={name!r}: unknown preset; allowed are {', '.join(PRESET_NAMES)} (or '' for none)"


def apply_preset(run_config: Mapping[str, Any], explicit: set[str] | None = None) -> tuple[dict, dict]:
    """`run_config` with its preset's keys filled in, and the keys that came from the preset.

    Precedence: defaults < preset values < the preset's per-algorithm values < explicit keys. `explicit` names
    the keys the user gave (simulation.run knows them); None (the ServerApp/ClientApp, which only see Flower's
    merged run config) takes every key whose value differs from its schema default as explicit, so there an
    explicit value that equals the default cannot override a preset. No preset, or an unknown one (resolve
    reports it): `run_config` unchanged."""
    values = dict(run_config)
    name = value_of(values, "preset")
    if not name or preset_error(name):
        return values, {}
    if explicit is None:
        explicit = {k for k, v in values.items() if k in SCHEMA and k != "preset" and v != SCHEMA[k].default}
    preset = PRESETS[name]
    algorithm = values["algorithm"] if "algorithm" in explicit else value_of(preset.values, "algorithm")
    taken = {k: v for k, v in preset.values_for(str(algorithm)).items() if k not in explicit}
    return {**values, **taken}, taken


def expand(overrides: Mapping) -> tuple[dict, dict]:
    """(the overrides to launch with, the keys that came from the preset). The user's keys win over the preset
    even where they equal the default; no preset: the overrides unchanged."""
    overrides = dict(overrides)
    name = value_of(overrides, "preset")
    if not name:
        return overrides, {}
    if (err := preset_error(name)) is not None:
        raise ConfigError(err)
    expanded, taken = apply_preset(overrides, explicit=set(overrides))
    return {**expanded, "preset-expanded": True}, taken


# --- showing presets ---------------------------------------------------------------------------------------------


def describe(cfg: Any, from_preset: Mapping, explicit: Mapping) -> str:
    """The resolved config `cfg` (a fedsuite.config.run_config.Config): every key that differs from its default or was
    set by the preset or -c, with where its value came from."""
    name = cfg.preset
    head = "run config"
    if name:
        head += f" (preset {name!r}: {PRESETS[name].description}; {PRESETS[name].source})"
    schema = active_schema()  # the built-in keys and the registered plug-ins' keys
    given = [k for k in schema if k != "preset-expanded" and k in cfg]
    shown = [k for k in given if k in from_preset or k in explicit or cfg[k] != schema[k].default]
    width = max((len(k) for k in shown), default=0)
    preset_keys = PRESETS[name].values_for(cfg.algorithm) if name else {}
    lines = [head + ":"]
    for k in shown:
        if k in explicit:
            over = k in preset_keys and preset_keys[k] != cfg[k]
            origin = f"-c, over the preset's {preset_keys[k]!r}" if over else "-c"
        else:
            origin = "preset" if k in from_preset or k in preset_keys else "default"
        lines.append(f"  {k:<{width}} = {cfg[k]!r:<14} ({origin})")
    lines.append("  (every other key: its default, see docs/reference/run-config.md)")
    return "\n".join(lines)


def presets_table() -> str:
    """The preset table of docs/running/presets.md (Markdown)."""
    rows = ["| preset | what | algorithms | rounds | reproduces |", "|---|---|---|---|---|"]
    for p in PRESETS.values():
        algorithms = ", ".join(f"`{a}`" for a in p.algorithms)
        rows.append(f"| `{p.name}` | {p.description} | {algorithms} | {p.values['num-server-rounds']} | {p.source} |")
    return "\n".join(rows)
