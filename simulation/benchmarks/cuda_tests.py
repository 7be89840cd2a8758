"""The tests that need a CUDA device, as pytest node ids, one a line, for a machine that has one
(simulation/benchmarks/device_check.sh runs them there; CI has no GPU and skips them).

    python -m simulation.benchmarks.cuda_tests            # node ids under tests/
    python -m pytest -q $(python -m simulation.benchmarks.cuda_tests)

A test needs CUDA when a decorator of it, or of its class, other than a parametrize mentions `cuda` (`@needs_cuda`,
`@pytest.mark.skipif(not torch.cuda.is_available(), …)`), or its file's `pytestmark` does; tests/test_cuda_graphs.py
is taken whole (its CPU tests are about the recorded step too). Read from the source with `ast`, nothing imported.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

WHOLE_FILES = ("test_cuda_graphs.py",)


def mentions_cuda(node: ast.AST) -> bool:
    """A mark or skip condition that names CUDA (a parametrize list that holds the word does not count)."""
    text = ast.unparse(node)
    return "cuda" in text.lower() and "parametrize" not in text


def node_ids(path: Path, root: Path) -> list[str]:
    """The CUDA tests of one test file (its relative path alone when the whole file is)."""
    name = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(), filename=str(path))
    marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                 and mentions_cuda(n.value) for n in tree.body)  # fmt: skip
    if path.name in WHOLE_FILES or marked:
        return [name]
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            if any(mentions_cuda(d) for d in node.decorator_list):
                found.append(f"{name}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            whole = any(mentions_cuda(d) for d in node.decorator_list)
            found += [f"{name}::{node.name}::{m.name}" for m in node.body
                      if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                      and (whole or any(mentions_cuda(d) for d in m.decorator_list))]  # fmt: skip
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.cuda_tests", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--tests", default="tests", help="the folder of test files (test_*.py)")
    args = parser.parse_args(argv)
    folder = Path(args.tests)
    if not folder.is_dir():
        parser.error(f"--tests {args.tests!r}: no such folder")
    root = folder.parent
    for path in sorted(folder.glob("test_*.py")):
        for node_id in node_ids(path, root):
            print(node_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
