"""Run-config overrides: `-c "key=value …"` as the user writes it, and as Flower takes it (`flwr run -c`)."""

from __future__ import annotations

import json
import shlex

from fedsuite.config.run_config import ConfigError
from simulation.launcher.project import pyproject_defaults


def parse_overrides(overrides: list[str]) -> dict:
    """`-c "key=value key2=value2"` (TOML values) → dict; a malformed string or a repeated key is a ConfigError."""
    import click
    from flwr.common.config import parse_config_args

    seen: dict[str, str] = {}
    for text in overrides:
        try:
            pairs = shlex.split(text) if not text.strip().endswith(".toml") else []
        except ValueError as err:  # an unbalanced quote
            raise ConfigError(f"-c {text!r}: {err}; strings go in quotes: -c \"algorithm='fedprox'\"") from None
        for pair in pairs:
            key = pair.split("=", 1)[0].strip()
            if "=" not in pair:
                raise ConfigError(f'-c: {pair!r} is not key=value; write e.g. -c "{pair}=<value>"')
            if key in seen:
                raise ConfigError(f"-c: key {key!r} is given twice ({seen[key]!r} and {pair!r}); give it once")
            seen[key] = pair
    try:
        return parse_config_args(overrides) if overrides else {}
    except click.ClickException as err:
        raise ConfigError(
            f"-c {' '.join(overrides)!r}: {err.format_message()}; write key=value pairs with TOML values, "
            "strings in quotes: -c \"algorithm='fedprox' lr=0.05\""
        ) from None


def flower_overrides(overrides: dict) -> dict:
    """The overrides as Flower takes them: keys outside pyproject.toml's table (plug-in algorithms' keys) go into
    the one key `plugin-config`, which the apps unpack (fedsuite.config.run_config.unpack_plugin_config)."""
    from fedsuite.config.run_config import PLUGIN_CONFIG, parse_pairs

    table = pyproject_defaults()
    loose = {k: v for k, v in overrides.items() if k not in table}
    if not loose:
        return overrides
    packed = {**parse_pairs(str(overrides.get(PLUGIN_CONFIG, ""))), **loose}
    kept = {k: v for k, v in overrides.items() if k in table}
    return {**kept, PLUGIN_CONFIG: " ".join(f"{k}={toml_value(v)}" for k, v in packed.items())}


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)
