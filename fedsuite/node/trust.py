"""What a node operator lets the runs on their SuperNode execute: the `allowed-modules` node config key.

A run config may name code by import path (`model='package.module:factory'`, `dataset='package.module:loader'`),
and every SuperNode imports and calls it. Whoever may submit runs to the SuperLink therefore chooses code that
runs on the nodes. An operator restricts this with the node config key `allowed-modules`, a comma-separated list of
module names (a name also admits its submodules: `mylab` admits `mylab.models`). Built-in models and datasets are
always allowed; an empty value allows only them; without the key nothing is restricted.

`refusal` answers from the run config's names alone, before anything is imported. Under an allow-list the callable
must be a plain name of the admitted module (`mylab.models:factory`): a dotted attribute (`mylab.models:os.system`)
would reach whatever that module imports, so it is refused. A name the admitted module re-exports from elsewhere is
its author's choice: admit only modules whose top-level names you trust.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fedsuite.config.import_paths import parse_import_path
from fedsuite.config.run_config import Config
from fedsuite.models.networks import BUILTIN_MODELS

ALLOWED_MODULES_KEY = "allowed-modules"
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# The run-config keys whose value may be 'package.module:callable', code every node imports and calls.
IMPORT_PATH_KEYS = ("model", "dataset")


class NodeRefused(PermissionError):
    """This node's operator does not allow what the run names (one line, naming the node config key)."""


class NodeConfigError(ValueError):
    """A node config value this node cannot use (one line naming the key and the allowed values)."""


def allowed_modules(node_config: Mapping) -> tuple[str, ...] | None:
    """The operator's allow-list, or None when the node config has no `allowed-modules` (nothing restricted)."""
    if ALLOWED_MODULES_KEY not in node_config:
        return None
    names = tuple(part.strip() for part in str(node_config[ALLOWED_MODULES_KEY]).split(",") if part.strip())
    for name in names:
        if not _MODULE_NAME.match(name):
            given = node_config[ALLOWED_MODULES_KEY]
            raise NodeConfigError(f"node config {ALLOWED_MODULES_KEY}={given!r}: {name!r} is not a module name; give "
                                  "comma-separated dotted names such as 'mylab,tools.data'")  # fmt: skip
    return names


def admits(module: str, allowed: tuple[str, ...]) -> bool:
    """`module` is one of `allowed` or a submodule of one."""
    return any(module == name or module.startswith(name + ".") for name in allowed)


def refusal(cfg: Config, node_config: Mapping) -> str | None:
    """Why this node will not run `cfg` (one line), or None. Reads names only: nothing is imported."""
    allowed = allowed_modules(node_config)
    if allowed is None:
        return None
    named = []
    for key in IMPORT_PATH_KEYS:
        value = str(cfg[key])
        path = parse_import_path(value)
        if value in BUILTIN_MODELS.values() or path is None:  # a built-in, by short name or path
            continue
        if not admits(path.module, allowed) or "." in path.attribute:
            named.append(f"{key}={value!r}")
    if not named:
        return None
    offered = ", ".join(allowed) if allowed else "none, built-ins only"
    return (f"this node runs only models and loaders from {offered} (node config {ALLOWED_MODULES_KEY}), each "
            f"named 'module:callable' with a plain callable name; the run names {' and '.join(named)}")  # fmt: skip


def check(cfg: Config, node_config: Mapping) -> None:
    """Raise NodeRefused if this node's operator does not allow what `cfg` names."""
    reason = refusal(cfg, node_config)
    if reason is not None:
        raise NodeRefused(reason)
