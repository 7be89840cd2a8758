"""Keyword settings of fedsuite.app → a validated run config, and the settings a client must share with the server.

`lr=0.05, clients_per_round=5` are the run-config keys `lr` and `clients-per-round` (an underscore is a hyphen;
hyphenated names may be given through `**{"clients-per-round": 5}`); fedsuite.config.run_config.resolve checks them and
fills in
every default, so a default is still written only in fedsuite.config.run_config. Keys about the suite's own data, model,
results and evaluation have no meaning when the app brings its own: they are refused, each with what to do instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fedsuite.config.run_config import SCHEMA, Config, ConfigError, active_schema, resolve
from fedsuite.registry import known as registry

# The built-ins' tags, for readers of the built-in schema; the functions below read the active schema, so a
# plug-in algorithm's keys count with their own `app` and `client` tags.
REFUSED: dict[str, str] = {name: key.app for name, key in SCHEMA.items() if key.app}
_CLIENT_READS = tuple(name for name, key in SCHEMA.items() if key.client)
SETTINGS_KEY = "fedsuite.app-settings"  # fit-config entry: the server's values of the keys its clients read


def refused() -> dict[str, str]:
    """Keys the user's own app replaces, with what replaces them (each key's `app` tag, plug-ins' keys included):
    the message of the one-line error."""
    return {name: key.app for name, key in active_schema().items() if key.app}


def client_reads() -> tuple[str, ...]:
    """What a client reads from its settings besides its algorithm's own keys (each key's `client` tag)."""
    return tuple(name for name, key in active_schema().items() if key.client)


def allowed_keys() -> list[str]:
    """The run-config keys fedsuite.app takes as settings (plug-in algorithms' keys included)."""
    refused_keys = refused()
    return [name for name in active_schema() if name not in refused_keys]


def key_name(setting: str) -> str:
    return setting.replace("_", "-")


def run_config(algorithm: str, settings: Mapping[str, Any], fixed: Mapping[str, Any] | None = None) -> Config:
    """The resolved run config of `algorithm` with the keyword `settings` (and `fixed`, set by fedsuite.app itself);
    ConfigError naming the key for a refused or unknown setting or a bad value."""
    values: dict[str, Any] = {}
    refused_keys = refused()
    for setting, value in settings.items():
        name = key_name(setting)
        if name in values:
            raise ConfigError(f"{name}: given twice ({setting!r} and another spelling)")
        if name in refused_keys:
            raise ConfigError(f"{setting}: not a fedsuite.app setting ({refused_keys[name]})")
        values[name] = value
    unknown = sorted(set(values) - set(active_schema()))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown setting; allowed are {', '.join(allowed_keys())}")
    if not isinstance(algorithm, str) or algorithm not in registry.ALGORITHMS:
        raise ConfigError(f"algorithm={algorithm!r}: allowed values are {', '.join(registry.ALGORITHMS)}")
    return resolve({**values, **(fixed or {}), "algorithm": algorithm, "client-mapping": "fixed"})


def client_keys(cfg: Config) -> list[str]:
    """The keys a client of cfg's algorithm reads from its own settings, which must equal the server's."""
    algo = registry.ALGORITHMS[cfg.algorithm]
    return sorted({"algorithm", *client_reads(), *algo.client_args.values()})


def shared_settings(cfg: Config) -> str:
    """The values of client_keys(cfg) as JSON (sent to every client with its fit instructions)."""
    return json.dumps({key: cfg[key] for key in client_keys(cfg)}, sort_keys=True)


def mismatch(server_json: str, cfg: Config) -> str | None:
    """One line naming every shared setting in which this client differs from the server, or None."""
    server = json.loads(server_json)
    differ = [key for key in sorted(server) if key in cfg and cfg[key] != server[key]]
    if not differ:
        return None
    pairs = ", ".join(f"{key}: server {server[key]!r}, client {cfg[key]!r}" for key in differ)
    return f"configuration mismatch ({pairs}); give strategy() and client() the same settings"
