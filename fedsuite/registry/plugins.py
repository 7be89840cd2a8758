"""Plug-in algorithms: the registry that holds the built-ins and what other packages add.

A package registers an algorithm (a `fedsuite.registry.known.Algorithm`: its server rule and client as "module:Class",
its run-config keys as `fedsuite.config.run_config.Key`s) in one of two ways:

    # its pyproject.toml: loaded by every process that uses the registry (the apps, simulation.*, tests)
    [project.entry-points."fedsuite.algorithms"]
    fedavgm-nesterov = "fedavgm_plugin:algorithm"   # an Algorithm, or a callable returning one (or a tuple of them)

    # or in code, before the registry is used for that algorithm (this process only)
    fedsuite.registry.known.register(Algorithm(...))

Entry points are loaded once, lazily, when the registry is first read. An entry point that fails (an import error,
a callable that raises, something that is not an Algorithm) is named in one warning line and left out; the rest of
the registry works. An algorithm that takes a built-in name, or declares a run-config key some other algorithm
declares differently, or declares a key whose default lies outside its own range or choices (every run would
fail, built-ins included), or maps a constructor argument to a key nobody declares, is refused in one line (a
warning for an entry point, which is left out, a PluginError for `register`). `register` also imports the two
classes and refuses, in one line, one that does not import, is not a ServerRule / ClientRule subclass, a rule
without its own `aggregate`, or a constructor that does not accept the arguments the algorithm maps to keys; entry
points are read by config validation, which stays light, so their classes are imported when the algorithm is first
built (where a rule without `aggregate` is refused in one line by ServerRule itself, before any round). Once
registered, an algorithm is one more name in the registry: config validation, simulation.run/compare/sweep,
presets, checkpoints and results see no difference.

Flower's `flwr run` passes only run-config keys that the app's pyproject.toml [tool.flwr.app.config] lists, so a
plug-in's keys travel in the one built-in key `plugin-config` ("key=value" pairs), which
fedsuite.config.run_config.resolve
unpacks; simulation.run packs them itself (docs/own/algorithm.md#plug-in-keys-under-flwr-run).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from fedsuite.config.import_paths import ImportPathError, load_import_path, one_line, parse_import_path
from fedsuite.config.schema import COMMON_KEYS, default_refusal
from fedsuite.registry.entry import Algorithm

GROUP = "fedsuite.algorithms"
log = logging.getLogger("fedsuite.registry.plugins")


class PluginError(ValueError):
    """A plug-in algorithm the registry refuses (one line saying why)."""


def installed_entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=GROUP)


def _describe(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    package = f" (package {dist.name})" if dist is not None else ""
    return f"entry point {entry_point.name} = {entry_point.value}{package}"


class AlgorithmRegistry(Mapping[str, "Algorithm"]):
    """name → Algorithm: the built-ins, then the entry points of group `fedsuite.algorithms` (read on first use),
    then what `register` adds."""

    def __init__(self, built_in: Iterable[Algorithm],
                 discover: Callable[[], Iterable[importlib.metadata.EntryPoint]] = installed_entry_points
                 ) -> None:  # fmt: skip
        self._algorithms: dict[str, Algorithm] = {a.name: a for a in built_in}
        self.built_in = tuple(self._algorithms)  # the shipped names, in the registry's order
        self._discover = discover
        self._loaded = False

    # ---- Mapping ---------------------------------------------------------------------------------------------
    def _entries(self) -> dict[str, Algorithm]:
        if not self._loaded:
            self._loaded = True  # once, even when loading fails half-way
            self._load_entry_points()
        return self._algorithms

    def __getitem__(self, name: str) -> Algorithm:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __repr__(self) -> str:
        return f"AlgorithmRegistry({', '.join(self._entries())})"

    # ---- adding and removing ---------------------------------------------------------------------------------
    def register(self, algorithm: Algorithm) -> Algorithm:
        """Add `algorithm` (again registering an equal one is a no-op); raises PluginError saying why not. Beyond
        `refusal`, its classes are imported and checked (`class_refusal`)."""
        problem = self.refusal(algorithm) or class_refusal(algorithm)
        if problem is not None:
            raise PluginError(problem)
        self._entries()[algorithm.name] = algorithm
        return algorithm

    def unregister(self, name: str) -> None:
        """Remove a plug-in algorithm (tests); built-ins stay."""
        if name in self.built_in:
            raise PluginError(f"{name!r} is a built-in algorithm and cannot be removed")
        self._entries().pop(name, None)

    def refusal(self, algorithm: Any) -> str | None:
        """Why `algorithm` cannot join this registry, in one line, or None."""
        if not isinstance(algorithm, Algorithm):
            return f"expected a fedsuite.registry.known.Algorithm, got {type(algorithm).__name__}"
        name = algorithm.name
        if not isinstance(name, str) or not name or name != name.strip() or "," in name:
            return f"algorithm name {name!r}: expected a non-empty name without spaces around it or commas"
        if name in self.built_in:
            return f"plug-in algorithm {name!r} refused: {name!r} is a built-in algorithm; choose another name"
        present = self._entries().get(name)
        if present is not None and present != algorithm:
            return f"plug-in algorithm {name!r} refused: another algorithm of that name is registered"
        for what, path in (("strategy", algorithm.strategy), ("client", algorithm.client)):
            parsed = parse_import_path(path)
            if parsed is None:
                return f"plug-in algorithm {name!r} refused: {what}={path!r}, expected 'module:Class'"
            if parsed.module.partition(".")[0] in ("clients", "strategies"):  # the checkout's folder, not the package
                return (f"plug-in algorithm {name!r} refused: {what}={path!r} names a built-in half by its folder; "
                        f"write 'fedsuite.{path}' (docs/developer/add-an-algorithm.md)")  # fmt: skip
        built_in = {k.name: k for k in COMMON_KEYS}
        built_in.update({k.name: k for name in self.built_in for k in self._algorithms[name].keys})
        declared = {k.name: (k, "a built-in key") for k in built_in.values()}
        for other in self._entries().values():
            if other.name != name:
                declared.update(
                    {k.name: (k, f"algorithm {other.name!r}") for k in other.keys if k.name not in built_in}
                )
        own = {}
        for key in algorithm.keys:
            if (problem := default_refusal(key)) is not None:
                return f"plug-in algorithm {name!r} refused: {problem}"
            if key.name in declared and declared[key.name][0] != key:
                return (f"plug-in algorithm {name!r} refused: run-config key {key.name!r} is declared differently by "
                        f"{declared[key.name][1]}; use that declaration or another name")  # fmt: skip
            if key.name in own and own[key.name] != key:
                return f"plug-in algorithm {name!r} refused: run-config key {key.name!r} is declared twice"
            own[key.name] = key
        for arg, key_name in {**algorithm.strategy_args, **algorithm.client_args}.items():
            if key_name not in declared and key_name not in own:
                return (f"plug-in algorithm {name!r} refused: argument {arg!r} reads run-config key {key_name!r}, "
                        "which no one declares; add a Key for it to the algorithm's keys")  # fmt: skip
        return None

    def _load_entry_points(self) -> None:
        try:
            entry_points = list(self._discover())
        except Exception as err:  # a broken installation must not take the built-ins down
            log.warning("fedsuite: plug-in algorithms not loaded: listing entry points failed (%s)", one_line(err))
            return
        for entry_point in entry_points:
            where = _describe(entry_point)
            try:
                found = entry_point.load()
                found = found() if callable(found) else found
            except Exception as err:
                log.warning("fedsuite: plug-in %s failed to load (%s); it is left out", where, one_line(err))
                continue
            for algorithm in found if isinstance(found, list | tuple) else (found,):
                problem = self.refusal(algorithm)
                if problem is not None:
                    log.warning("fedsuite: plug-in %s: %s", where, problem)
                else:
                    self._algorithms[algorithm.name] = algorithm


def class_refusal(algorithm: Algorithm) -> str | None:
    """Why `algorithm`'s classes cannot be used, in one line, or None: `strategy` must import as a subclass of
    fedsuite.rules.server_rule.ServerRule that defines `aggregate` and `client` as one of
    fedsuite.rules.client_rule.ClientRule, and each constructor must accept the arguments its `strategy_args` /
    `client_args` declare and need no other. Imports both (torch included), so `register` runs it and entry points, read
    by light config validation, do not."""
    from fedsuite.rules.client_rule import ClientRule
    from fedsuite.rules.server_rule import ServerRule

    name = algorithm.name
    halves = (("strategy", algorithm.strategy, algorithm.strategy_args, ServerRule),
              ("client", algorithm.client, algorithm.client_args, ClientRule))  # fmt: skip
    for what, path, args, base in halves:
        try:
            found = load_import_path(what, path, shape="'module:Class'")
        except ImportPathError as err:
            why = err.reason or err.problem
            return f"plug-in algorithm {name!r} refused: {what}={path!r} cannot be imported ({why})"
        if not isinstance(found, type) or not issubclass(found, base):
            kind = f"the class {found.__name__}" if isinstance(found, type) else f"a {type(found).__name__}"
            return (f"plug-in algorithm {name!r} refused: {what}={path!r} is {kind}, expected a subclass of "
                    f"{base.__module__}.{base.__name__}")  # fmt: skip
        if base is ServerRule and found.aggregate is ServerRule.aggregate:
            return (f"plug-in algorithm {name!r} refused: strategy={path!r} does not define aggregate(server_round, "
                    "replies), which returns the new global model from the round's replies")  # fmt: skip
        if (problem := _constructor_problem(found, args)) is not None:
            return f"plug-in algorithm {name!r} refused: {what} {path}: {problem}"
    return None


def _constructor_problem(cls: type, args: Mapping[str, str]) -> str | None:
    """Why `cls(first, **{arg: value for arg in args})` cannot be called, or None (also when it cannot be told)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    kinds = {p.kind for p in params.values()}
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        for arg, key in args.items():
            if arg not in params or params[arg].kind not in named:
                takes = ", ".join(params) or "nothing"
                return (f"the constructor does not accept argument {arg!r} (run-config key {key!r}); it takes "
                        f"{takes}")  # fmt: skip
    try:
        inspect.signature(cls).bind(None, **dict.fromkeys(args))
    except TypeError as err:
        return f"the constructor cannot be called with the declared arguments {sorted(args)} ({err})"
    return None
