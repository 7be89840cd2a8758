"""Names that moved when fedsuite/ was laid out by job, still served from their old places for one release.

A module that moved (`fedsuite.rule`, now `fedsuite.rules.server_rule`) is importable under its old name: the import
returns the new module itself, so classes stay identical, and warns once with a DeprecationWarning that names the new
place. A folder that took an old module's name (`fedsuite.config`, `fedsuite.local`, …) hands the old module's names
on from its new module the same way (`forwarding`). docs/developer/architecture.md lists the folders.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

# old module -> its module now; every old top-level module of fedsuite/ is here.
MOVED: dict[str, str] = {
    "fedsuite.config": "fedsuite.config.run_config",
    "fedsuite.schema": "fedsuite.config.schema",
    "fedsuite.presets": "fedsuite.config.presets",
    "fedsuite.settings": "fedsuite.config.settings",
    "fedsuite.import_paths": "fedsuite.config.import_paths",
    "fedsuite.tunable": "fedsuite.config.tunable",
    "fedsuite.tuned": "fedsuite.config.tuned",
    "fedsuite.registry": "fedsuite.registry.known",
    "fedsuite.algorithm": "fedsuite.registry.entry",
    "fedsuite.builtin_algorithms": "fedsuite.registry.builtin",
    "fedsuite.plugins": "fedsuite.registry.plugins",
    "fedsuite.costs": "fedsuite.registry.costs",
    "fedsuite.rule": "fedsuite.rules.server_rule",
    "fedsuite.client_rule": "fedsuite.rules.client_rule",
    "fedsuite.declared": "fedsuite.rules.declared",
    "fedsuite.rounds": "fedsuite.rules.rounds",
    "fedsuite.local": "fedsuite.local.loop",
    "fedsuite.adaptive": "fedsuite.local.adaptive",
    "fedsuite.variance": "fedsuite.local.variance",
    "fedsuite.device": "fedsuite.local.device",
    "fedsuite.models": "fedsuite.models.networks",
    "fedsuite.text_models": "fedsuite.models.text",
    "fedsuite.client_adapter": "fedsuite.node.client",
    "fedsuite.client_app": "fedsuite.node.app",
    "fedsuite.node": "fedsuite.node.holdings",
    "fedsuite.node_trust": "fedsuite.node.trust",
    "fedsuite.server_app": "fedsuite.server.app",
    "fedsuite.sampling": "fedsuite.server.sampling",
    "fedsuite.blockwise": "fedsuite.server.blockwise",
    "fedsuite.pruning": "fedsuite.server.pruning",
    "fedsuite.state": "fedsuite.state.store",
    "fedsuite.state_files": "fedsuite.state.files",
    "fedsuite.state_plan": "fedsuite.state.plan",
    "fedsuite.host_memory": "fedsuite.state.host_memory",
    "fedsuite.results": "fedsuite.results.folder",
    "fedsuite.checkpoint": "fedsuite.results.checkpoint",
    "fedsuite.checkpoint_files": "fedsuite.results.checkpoint_files",
    "fedsuite.tracking": "fedsuite.results.tracking",
    "fedsuite.evaluation": "fedsuite.evaluation.metrics",
    "fedsuite.data_checks": "fedsuite.evaluation.data_checks",
    "fedsuite.payload": "fedsuite.codec.payload",
    "fedsuite.npy_bytes": "fedsuite.codec.npy_bytes",
    "fedsuite.dlg": "fedsuite.dlg.attack",
    "fedsuite.dlg_analytic": "fedsuite.dlg.analytic",
    "fedsuite.dlg_defences": "fedsuite.dlg.defences",
    "fedsuite.dlg_messages": "fedsuite.dlg.messages",
    "fedsuite.inprocess": "fedsuite.run.inprocess",
    "fedsuite.stop_note": "fedsuite.run.stop_note",
}


def _warn(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel)


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new, stacklevel=6)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is the new one, already run."""


class _OldNames(importlib.abc.MetaPathFinder):
    """Finds a moved module by its old name (one that is no folder now)."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None or fullname in FOLDER_FACES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


# old modules whose name is now a folder: their names are handed on by the folder's __init__ (forwarding)
FOLDER_FACES = frozenset(old for old in MOVED if any(new.startswith(old + ".") for new in MOVED.values()))


def install() -> None:
    """Put the old-name finder first on sys.meta_path, once."""
    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldNames())


def forwarding(folder: str, warn: bool = True) -> Callable[[str], object]:
    """A folder's module `__getattr__`: a name of the old module `folder` comes from the module it moved to."""

    def __getattr__(name: str) -> object:
        if name.startswith("__") or _is_submodule(folder, name):
            raise AttributeError(name)  # the import system then imports the folder's own module of that name
        new = MOVED[folder]
        value = getattr(importlib.import_module(new), name, _missing)
        if value is _missing:
            raise AttributeError(f"module {folder!r} has no attribute {name!r}")
        if warn and not _asked_by_import():  # `from folder import name` asks hasattr first, then reads it: warn once
            _warn(f"{folder}.{name}", f"{new}.{name}")
        return value

    return __getattr__


_missing = object()


def _asked_by_import() -> bool:
    """Whether the import system's `from … import` check (importlib's _handle_fromlist) is asking for the name: the
    read that follows it warns."""
    caller = sys._getframe(2)
    return caller.f_code.co_name == "_handle_fromlist" and "importlib" in caller.f_code.co_filename


def _is_submodule(folder: str, name: str) -> bool:
    paths = getattr(sys.modules.get(folder), "__path__", ())
    return any((Path(p) / f"{name}.py").exists() or (Path(p) / name / "__init__.py").exists() for p in paths)
