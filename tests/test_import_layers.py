"""The house imports downwards only: no circle among the modules of fedsuite/, strategies/ and clients/ (imports at
the top, inside functions and type-only ones all count), and the library (fedsuite/) imports neither an algorithm
half (strategies/, clients/) nor the studies (simulation/). Built-ins are named to the library as "module:Class"
strings in their registry entries, loaded when built."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fedsuite", "strategies", "clients")
# strategies/ and clients/ are installed as fedsuite.strategies and fedsuite.clients (pyproject.toml's
# [tool.setuptools]); here a module is named by its folder.
INSTALLED_AS = {"fedsuite.strategies": "strategies", "fedsuite.clients": "clients"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def by_folder(module: str) -> str:
    for installed, folder in INSTALLED_AS.items():
        if module == installed or module.startswith(installed + "."):
            return folder + module.removeprefix(installed)
    return module


def imported_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module of `from … import …` in module `name` (relative imports resolved)."""
    if not node.level:
        return node.module
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports() -> dict[str, set[str]]:
    """module → the project modules it imports (`from package import name`: the module `name` when it is one, else
    the package), studies (simulation/) included as targets."""
    modules = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(modules) | {module_name(p) for p in (ROOT / "simulation").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [by_folder(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = by_folder(imported_module(name, path, node))
                submodules = [f"{module}.{alias.name}" for alias in node.names]
                targets = [t if t in known else module for t in submodules]
            else:
                continue
            found |= {t for t in targets if t in known and t != name}
        graph[name] = found
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle():
    found = cycle(imports())
    assert found is None, " → ".join(found)


def test_the_library_imports_no_algorithm_half_and_no_study():
    upward = {m: sorted(t for t in targets if t.split(".")[0] in ("strategies", "clients", "simulation"))
              for m, targets in imports().items() if m.startswith("fedsuite")}  # fmt: skip
    assert {m: t for m, t in upward.items() if t} == {}


def test_the_check_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_relative_imports_and_installed_names_count():
    graph = imports()
    assert "strategies.feddyn" in graph["strategies.fedspeed"]  # from .feddyn import FedDyn
    assert {"clients.fadamet", "clients.localadam"} <= graph["clients.fadamgt"]
