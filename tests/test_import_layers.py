"""The house imports downwards only: no circle among the modules of fedsuite/, strategies/ and clients/ (imports at
the top, inside functions and type-only ones all count), and the library (fedsuite/) imports neither an algorithm
half (strategies/, clients/) nor the studies (simulation/). Built-ins are named to the library as "module:Class"
strings in their registry entries, loaded when built."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fedsuite", "strategies", "clients")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module → the project modules it imports (`from package import name`: the module `name` when it is one, else
    the package)."""
    modules = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                submodules = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [t if t in modules else node.module for t in submodules]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
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
