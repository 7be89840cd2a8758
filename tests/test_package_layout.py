"""fedsuite/ laid out by job (docs/developer/architecture.md#the-folders): every module lives in a folder that says
what it holds, each folder has a docstring of its own, is installed and is named on the architecture page; no source
file is over 400 lines and no function over 50; every module that moved still imports under its old name for one
release, as the same module object, with a DeprecationWarning that names its new place (fedsuite/moved.py)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from fedsuite import moved

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fedsuite"
ARCHITECTURE = ROOT / "docs" / "developer" / "architecture.md"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50
SOURCE_FOLDERS = ("fedsuite", "strategies", "clients")


def folders() -> list[Path]:
    return sorted(
        p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE and "__pycache__" not in p.parts
    )


def test_no_module_stands_at_the_top_of_the_package():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "moved.py"], f"modules at the top of fedsuite/: {top}; put them in a folder by job"


def test_every_folder_says_what_it_holds_is_installed_and_is_on_the_architecture_page():
    installed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    page = ARCHITECTURE.read_text()
    for folder in folders():
        dotted = ".".join(folder.relative_to(ROOT).parts)
        assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text())), f"{dotted} has no docstring"
        assert dotted in installed, f"{dotted} is missing from pyproject.toml's [tool.setuptools] packages"
        assert f"`{folder.relative_to(ROOT).as_posix()}/`" in page, (
            f"{folder.relative_to(ROOT)}/ is not on {ARCHITECTURE}"
        )


def source_files():
    for name in SOURCE_FOLDERS:
        yield from sorted((ROOT / name).rglob("*.py"))


def test_no_source_file_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in source_files() if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


def test_no_function_is_over_50_lines():
    long = {}
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def test_every_old_module_name_is_in_the_table_and_its_new_module_exists():
    assert len(moved.MOVED) >= 48
    for old, new in moved.MOVED.items():
        assert importlib.util.find_spec(new) is not None, f"{old} -> {new}: no such module"


@pytest.mark.parametrize("old", ["fedsuite.rule", "fedsuite.client_rule", "fedsuite.declared", "fedsuite.text_models",
                                 "fedsuite.client_adapter", "fedsuite.schema", "fedsuite.tunable"])  # fmt: skip
def test_a_moved_module_imports_under_its_old_name_as_the_same_module_with_a_warning(old):
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error')\n"
        "try:\n"
        f"    importlib.import_module({old!r})\n"
        "except DeprecationWarning as w:\n"
        "    print('WARNED', w)\n"
        "warnings.simplefilter('ignore')\n"
        f"old = importlib.import_module({old!r})\n"
        f"print('SAME', old is importlib.import_module({moved.MOVED[old]!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert f"WARNED {old} moved to {moved.MOVED[old]}" in out.stdout, out.stderr[-2000:]
    assert "SAME True" in out.stdout, out.stderr[-2000:]


def test_a_folder_that_took_an_old_name_hands_its_names_on_with_a_warning():
    from fedsuite.config.run_config import resolve
    from fedsuite.local.loop import train_local

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import fedsuite.config
        import fedsuite.local

        assert fedsuite.config.resolve is resolve
        assert fedsuite.local.train_local is train_local
    said = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert any("fedsuite.config.resolve moved to fedsuite.config.run_config.resolve" in s for s in said)
    assert any("fedsuite.local.train_local moved to fedsuite.local.loop.train_local" in s for s in said)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        fedsuite.config.no_such_name  # noqa: B018


def test_from_a_folder_import_an_old_name_warns_once():
    """`from folder import name` asks hasattr(folder, name) before it reads the name: only the read warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from fedsuite.registry import register  # noqa: F401

    said = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert said == ["fedsuite.registry.register moved to fedsuite.registry.known.register; the old name goes in the "
                    "next release"]  # fmt: skip


def test_the_verification_kit_is_its_folder_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from fedsuite import testing as kit

        assert callable(kit.check_reduction) and "check_reduction" in kit.__all__


def test_the_message_keys_did_not_move_with_the_modules():
    """A SuperNode of the release before the layout reads these fit-config and metrics keys: they are wire format,
    not module names, and stay as they were."""
    from fedsuite.app.settings import SETTINGS_KEY
    from fedsuite.batched.shares import SHARE_KEY
    from fedsuite.codec import payload

    keys = (payload.ARRAYS_KEY, payload.STATE_ACCEPTED, payload.PARTITION_KEY, payload.STATE_KEY, payload.ALGORITHM_KEY)
    assert keys == ("fedsuite.arrays", "fedsuite.state-accepted", "fedsuite.partition-id", "fedsuite.state-key",
                    "fedsuite.algorithm")  # fmt: skip
    assert (SETTINGS_KEY, SHARE_KEY) == ("fedsuite.app-settings", "fedsuite.share")
