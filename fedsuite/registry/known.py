"""The algorithms a process knows: the built-ins (fedsuite/registry/builtin.py), the plug-ins installed under the
entry-point group `fedsuite.algorithms`, and those added with `register(...)` (fedsuite/registry/plugins.py says how),
with what the rest of the suite asks of them: the schema they make (`active_schema`), their own config checks
(`algorithm_errors`) and their built halves (`build_rule`, `build_client`).

Rule and client classes are imported only when an algorithm is built, so config validation stays light. What an
algorithm costs is derived from its declarations in fedsuite/registry/costs.py. fedsuite.testing.kit is the plug-ins'
verification kit.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fedsuite.config.import_paths import load_import_path
from fedsuite.config.schema import COMMON_KEYS, ConfigError, Key, float_list
from fedsuite.registry.builtin import BUILT_IN, KEYS
from fedsuite.registry.entry import Algorithm
from fedsuite.registry.plugins import AlgorithmRegistry
from fedsuite.stages.refusals import mechanism_errors

__all__ = ["ALGORITHMS", "Algorithm", "active_schema", "algorithm_errors", "build_client", "build_rule", "register"]

ALGORITHMS: AlgorithmRegistry = AlgorithmRegistry(BUILT_IN)

_LIST_ARGS = {"alphas", "betas"}  # comma-separated run-config strings → tuples of floats


def _schema(keys: tuple[Key, ...], names: tuple[str, ...]) -> dict[str, Key]:
    schema = {key.name: key for key in COMMON_KEYS}
    schema["algorithm"] = replace(schema["algorithm"], choices=names)
    for key in keys:
        if key.name in schema and schema[key.name] != key:
            raise ConfigError(f"run-config key {key.name!r} is declared twice, differently (a plug-in algorithm?)")
        schema[key.name] = key
    return schema


# The schema of the built-ins alone: what Flower's pyproject.toml table lists, and what no plug-in may redeclare.
BUILT_IN_SCHEMA: dict[str, Key] = _schema(KEYS, tuple(algorithm.name for algorithm in BUILT_IN))


def extra_keys() -> tuple[Key, ...]:
    """The run-config keys registered plug-ins add to the built-in schema."""
    return tuple(key for name, algo in ALGORITHMS.items() if name not in ALGORITHMS.built_in for key in algo.keys)


def active_schema() -> dict[str, Key]:
    """The schema of this process: the common keys, every registered algorithm's keys, and the registered names as
    `algorithm`'s allowed values. Without plug-ins this is BUILT_IN_SCHEMA."""
    names, extra = tuple(ALGORITHMS), extra_keys()
    if names == ALGORITHMS.built_in and not extra:
        return BUILT_IN_SCHEMA
    return _schema(KEYS + extra, names)


def algorithm_errors(values: Mapping[str, Any]) -> list[str]:
    """The chosen algorithm's own config rules (run by fedsuite.config.run_config.resolve after every key passed its
    check)."""
    algo = ALGORITHMS.get(str(values["algorithm"]))
    if algo is None:
        return []
    errors = []
    if values.get("agg-scale") == "1/N" and not algo.sum_scale:
        allowed = ", ".join(name for name, a in ALGORITHMS.items() if a.sum_scale)
        errors.append(f"agg-scale='1/N': defined for {allowed} (the LoSAC suite); algorithm={algo.name!r} allows mean")
    errors += mechanism_errors(values, algo)
    return errors + [problem for check in algo.checks if (problem := check(values)) is not None]


def register(algorithm: Algorithm) -> Algorithm:
    """Add a plug-in algorithm to this process's registry (fedsuite.registry.plugins); raises PluginError saying why
    not. Packages that want every process (the apps, simulation.*) to see it declare an entry point instead."""
    return ALGORITHMS.register(algorithm)


# Where the built-in halves live once fedsuite is installed; the folders of the repository they are installed from.
_BUILT_IN_HALVES = {"fedsuite.strategies": "strategies", "fedsuite.clients": "clients"}


def load_class(path: str, what: str = "class"):
    """The class a registry entry names as "module:Class". Built-in halves have one spelling,
    "fedsuite.strategies.<module>:<Class>" and "fedsuite.clients.<module>:<Class>": installed fedsuite (a wheel, or the
    checkout installed editable) holds them there. A Flower app bundle run where fedsuite is not installed carries
    them as its own top-level folders strategies/ and clients/ (Flower puts the bundle's folder on sys.path), so only
    where fedsuite.strategies (fedsuite.clients) cannot be found is the same module imported from strategies
    (clients). `what` ('strategy', 'client') names the half in the error."""
    return load_import_path(what, path, shape="'module:Class'", module_name=_importable)


def _importable(module: str) -> str:
    for package, folder in _BUILT_IN_HALVES.items():
        if module.startswith(package + ".") and importlib.util.find_spec(package) is None:
            return folder + module.removeprefix(package)
    return module


def _kwargs(cfg: Mapping[str, Any], args: dict[str, str]) -> dict:
    return {arg: float_list(cfg[key]) if arg in _LIST_ARGS else cfg[key] for arg, key in args.items()}


def build_rule(cfg: Mapping[str, Any], settings):
    """The algorithm's server rule (strategies/) with its hyper-parameters from `cfg`."""
    algo = ALGORITHMS[cfg["algorithm"]]
    return load_class(algo.strategy, "strategy")(settings, **_kwargs(cfg, algo.strategy_args))


def build_client(cfg: Mapping[str, Any], node):
    algo = ALGORITHMS[cfg["algorithm"]]
    return load_class(algo.client, "client")(node, **_kwargs(cfg, algo.client_args))
