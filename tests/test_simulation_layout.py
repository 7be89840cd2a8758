"""simulation/ by job: every `python -m simulation…` command the docs name exists and answers --help (no Ray, no
run), the launcher CLI is short functions with one job, and the study commands are declared on the experiment
engine's Study."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from simulation.experiment.study import Study

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if "runs" not in p.parts)]
COMMAND = re.compile(r"python -m (simulation(?:\.\w+)+)")
NO_HELP = {"simulation.launcher.reaper"}  # started by a launch with its positional arguments, never by hand
STUDIES = ("simulation.compare", "simulation.sweep", "simulation.tune", "simulation.studies.losac_table2",
           "simulation.studies.lora")  # fmt: skip


def documented_modules() -> dict[str, str]:
    """{module: the first page naming it} for every `python -m simulation…` in README.md and docs/."""
    found: dict[str, str] = {}
    for page in PAGES:
        for module in COMMAND.findall(page.read_text()):
            found.setdefault(module, str(page.relative_to(ROOT)))
    return found


DOCUMENTED = documented_modules()


def test_the_readme_commands_keep_their_names():
    assert {"simulation.run", "simulation.compare", "simulation.sweep", "simulation.tune",
            "simulation.algorithms"} <= set(DOCUMENTED)  # fmt: skip


@pytest.mark.parametrize("module", sorted(set(DOCUMENTED) - NO_HELP))
def test_a_documented_command_exists_and_answers_help(module, monkeypatch, capsys):
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin.startswith(str(ROOT / "simulation")), f"{DOCUMENTED[module]}: {module}"
    main = importlib.import_module(module).main
    monkeypatch.setattr("sys.argv", [module, "--help"])
    try:
        code = main(["--help"]) if inspect.signature(main).parameters else main()
    except SystemExit as done:  # argparse's --help
        code = done.code
    assert code in (0, None) and capsys.readouterr().out.strip(), f"{DOCUMENTED[module]}: {module} --help"


def _functions(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    return {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}  # fmt: skip


def test_the_launcher_cli_is_short_functions_with_one_job():
    run = _functions(ROOT / "simulation" / "run.py")
    assert set(run) == {"build_parser", "check_only", "unfinished", "main"}  # the rest is simulation/launcher/
    long = {f"{path.relative_to(ROOT)}:{name}": n for path in (ROOT / "simulation").rglob("*.py")
            for name, n in _functions(path).items() if n > 45}  # fmt: skip
    assert long == {}, f"functions over 45 lines: {long}"


@pytest.mark.parametrize("module", STUDIES)
def test_a_study_command_is_declared_on_the_study(module):
    main = importlib.import_module(module).main
    assert isinstance(main.__self__, Study) and main.__self__.module == module


def test_every_study_says_its_own_exit_code():
    """The base has no default exit code: a study that did not look at its runs' outcomes cannot report success."""
    import pytest

    from simulation.experiment.study import Study

    with pytest.raises(NotImplementedError):
        Study(None).exit_code(None, None, "")
    for module in ("simulation.compare", "simulation.sweep", "simulation.tune", "simulation.studies.lora",
                   "simulation.studies.losac_table2"):  # fmt: skip
        study = next(v for v in vars(__import__(module, fromlist=["_"])).values()
                     if isinstance(v, type) and issubclass(v, Study) and v is not Study)  # fmt: skip
        assert study.exit_code is not Study.exit_code, module
