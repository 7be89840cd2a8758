"""'package.module:callable': how a run config names code of its own (`model`, `dataset`), how a registry entry names
an algorithm's halves (`strategy`, `client`), and what a node's `allowed-modules` judges. One parser
(`parse_import_path`), so that what is checked is what is imported, and one loader (`load_import_path`) whose
error is one line naming the key: `model='pkg.mod:nope': cannot import it (AttributeError: …)`.

The part after the colon may be dotted (`pkg.mod:Class.build`); it is looked up attribute by attribute. No other
fedsuite module is imported here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

SHAPE = "'package.module:callable'"


class ImportPath(NamedTuple):
    module: str  # 'package.module'
    attribute: str  # 'callable', or a dotted 'Class.method'

    def __str__(self) -> str:
        return f"{self.module}:{self.attribute}"

    @property
    def name(self) -> str:
        """The callable's own name, the last part of the attribute ('pkg.mod:Class.build' → 'build')."""
        return self.attribute.rsplit(".", 1)[-1]


class ImportPathError(ValueError):
    """A value that is not an import path or does not import; its text is one line naming the key."""

    def __init__(self, key: str, value: Any, problem: str, reason: str = ""):
        super().__init__(f"{key}={value!r}: {problem}")
        self.key, self.value, self.problem = key, value, problem
        self.reason = reason  # 'ErrorType: message' when it did not import


def parse_import_path(value: Any) -> ImportPath | None:
    """`value` split at its colon, or None when it is not 'module:callable' (a string with one colon, text on both
    sides of it and no space)."""
    if not isinstance(value, str) or " " in value:
        return None
    module, sep, attribute = value.partition(":")
    if not (sep and module and attribute) or ":" in attribute:
        return None
    return ImportPath(module, attribute)


def is_import_path(value: Any) -> bool:
    """Whether `value` reads as 'package.module:callable' (a user model or data loader, an algorithm's half)."""
    return parse_import_path(value) is not None


def one_line(err: BaseException) -> str:
    """'ErrorType: message', its first line, at most 300 characters."""
    return f"{type(err).__name__}: {err}".splitlines()[0][:300]


def load_import_path(key: str, value: Any, shape: str = SHAPE, module_name: Callable[[str], str] = str) -> Any:
    """The object `value` names, imported; raises ImportPathError naming `key` when `value` is not `shape` or does
    not import (whatever the module raises while importing included). `module_name`: the module to import for the
    path's module (the registry's built-in halves outside an installed fedsuite)."""
    path = parse_import_path(value)
    if path is None:
        raise ImportPathError(key, value, f"expected {shape}")
    try:
        target: Any = importlib.import_module(module_name(path.module))
        for part in path.attribute.split("."):
            target = getattr(target, part)
    except Exception as err:  # ImportError, AttributeError, or whatever the module raises while importing
        reason = one_line(err)
        raise ImportPathError(key, value, f"cannot import it ({reason})", reason) from err
    return target
