"""Presets on the launcher side: expand a preset so that the user's -c keys always win, print the resolved config,
and README's preset table.

    python -m simulation.presets            # print the table
    python -m simulation.presets --write    # refresh it in README.md between its markers

The ServerApp/ClientApp only see Flower's merged run config, where a key equal to its default cannot be told from
an unset one (fedsuite.config.apply_preset). simulation.run and simulation.compare know which keys the user gave,
so they expand the preset here and launch with every preset key written out and `preset-expanded=true`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fedsuite.config import SCHEMA, Config, ConfigError, apply_preset, preset_error
from fedsuite.presets import PRESETS
from simulation.algorithms import readme_block_command

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- generated: python -m simulation.presets --write -->", "<!-- end generated presets -->"


def expand(overrides: Mapping) -> tuple[dict, dict]:
    """(the overrides to launch with, the keys that came from the preset). The user's keys win over the preset
    even where they equal the default; no preset: the overrides unchanged."""
    overrides = dict(overrides)
    name = overrides.get("preset", "")
    if not name:
        return overrides, {}
    if (err := preset_error(name)) is not None:
        raise ConfigError(err)
    expanded, taken = apply_preset(overrides, explicit=set(overrides))
    return {**expanded, "preset-expanded": True}, taken


def describe(cfg: Config, from_preset: Mapping, explicit: Mapping) -> str:
    """The resolved config: every key that differs from its default or was set by the preset or -c, with where
    its value came from."""
    name = str(cfg["preset"])
    head = "run config"
    if name:
        head += f" (preset {name!r}: {PRESETS[name].description}; {PRESETS[name].source})"
    shown = [k for k in SCHEMA if k != "preset-expanded" and (k in from_preset or k in explicit
             or cfg[k] != SCHEMA[k].default)]  # fmt: skip
    width = max((len(k) for k in shown), default=0)
    preset_keys = PRESETS[name].values_for(str(cfg["algorithm"])) if name else {}
    lines = [head + ":"]
    for k in shown:
        if k in explicit:
            over = k in preset_keys and preset_keys[k] != cfg[k]
            origin = f"-c, over the preset's {preset_keys[k]!r}" if over else "-c"
        else:
            origin = "preset" if k in from_preset or k in preset_keys else "default"
        lines.append(f"  {k:<{width}} = {cfg[k]!r:<14} ({origin})")
    lines.append("  (every other key: its default, see README Run-config keys)")
    return "\n".join(lines)


def presets_table() -> str:
    rows = ["| preset | what | algorithms | rounds | reproduces |", "|---|---|---|---|---|"]
    for p in PRESETS.values():
        algorithms = ", ".join(f"`{a}`" for a in p.algorithms)
        rows.append(f"| `{p.name}` | {p.description} | {algorithms} | {p.values['num-server-rounds']} | {p.source} |")
    return "\n".join(rows)


def generated() -> str:
    return f"{BEGIN}\n\n{presets_table()}\n\n{END}"


def main() -> None:
    readme_block_command(__doc__, BEGIN, END, generated)


if __name__ == "__main__":
    main()
