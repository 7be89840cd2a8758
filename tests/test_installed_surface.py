"""What installing fedsuite puts in an environment: one top-level package, `fedsuite`, with the algorithm halves as
fedsuite.strategies and fedsuite.clients (from the repository's strategies/ and clients/) and without the checkout's
experiment layer (simulation/), so a user's own `clients` or `simulation` module never clashes with it
(pyproject.toml's [tool.setuptools], docs/developer/architecture.md).

The wheel is built from a copy of the checkout (nothing is written into it). Three tests install it, or the copy
in editable mode as CI does, into a throwaway venv whose dependencies come from this interpreter's site-packages,
and import from a folder outside the repository."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT = 300
PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
# What the copy leaves out: history, the docs with their study folders, build outputs, and the results folders runs
# write at the top of the checkout (fedsuite/results/ is the library's own folder and is copied).
NOT_COPIED_ANYWHERE = shutil.ignore_patterns(".git", "docs", ".venv", "build", "dist", "*.egg-info", "__pycache__")


def not_copied(folder: str, names: list[str]) -> set[str]:
    return set(NOT_COPIED_ANYWHERE(folder, names)) | ({"results"} & set(names) if Path(folder) == ROOT else set())


def checkout_copy(base: Path) -> Path:
    copy = base / "checkout"
    shutil.copytree(ROOT, copy, ignore=not_copied)
    return copy


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, *PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(base / "dist")]
    subprocess.run([*build, str(checkout_copy(base))], check=True, capture_output=True, timeout=CHILD_TIMEOUT)
    (found,) = (base / "dist").glob("fedsuite-*.whl")
    return found


def test_the_wheel_holds_fedsuite_only_with_both_algorithm_halves(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["fedsuite"]
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"fedsuite"}
    for folder, package in (("strategies", "fedsuite/strategies"), ("clients", "fedsuite/clients")):
        modules = sorted(p.name for p in (ROOT / folder).glob("*.py"))
        assert "__init__.py" in modules and "fedavg.py" in modules
        assert {f"{package}/{m}" for m in modules} <= names
    library = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fedsuite").rglob("*.py")}
    assert library - names == set()  # every module of the library, subpackages included, is installed


def test_the_registry_names_a_bundle_folder_only_where_fedsuite_halves_are_not_installed(monkeypatch):
    import importlib.util

    from fedsuite.registry.known import _importable

    names = ("fedsuite.strategies.fedavg", "fedsuite.clients.fedsam", "fedsuite.strategies", "plugin.strategies.x")
    assert [_importable(n) for n in names] == list(names)  # installed (here: the checkout, editable)
    found, missing = importlib.util.find_spec, ("fedsuite.strategies", "fedsuite.clients")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else found(name, *a))
    bundle = ["strategies.fedavg", "clients.fedsam", "fedsuite.strategies", "plugin.strategies.x"]
    assert [_importable(n) for n in names] == bundle


def throwaway_venv(base: Path) -> Path:
    """A venv without packages of its own that finds fedsuite's dependencies in this interpreter's site-packages:
    listed in a .pth file as plain paths, so the .pth files there (an editable fedsuite's finder) do not run."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=CHILD_TIMEOUT)
    python = venv / "bin" / "python"
    where = [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    purelib = subprocess.run(where, check=True, capture_output=True, text=True, timeout=CHILD_TIMEOUT).stdout.strip()
    dependencies = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (Path(purelib) / "fedsuite-dependencies.pth").write_text("\n".join(dependencies) + "\n")
    return python


def child_env() -> dict[str, str]:
    """This environment without PYTHONPATH: the child sees only what the venv installs."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run_in(python: Path, cwd: Path, script: str) -> dict:
    done = subprocess.run([python, "-c", textwrap.dedent(script)], cwd=cwd, env=child_env(), capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# Where a process finds the built-in halves: through the registry, as every run does, and by their module names.
WHERE = """
    import importlib.util, json, sys
    from fedsuite.registry.known import load_class
    halves = [load_class(name) for name in ("fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedavg:FedAvgClient",
                                            "fedsuite.strategies.fedspeed:FedSpeed",
                                            "fedsuite.clients.fadamgt:FAdamGTClient")]
    installed = importlib.util.find_spec("fedsuite.strategies") is not None
    if installed:
        import fedsuite.strategies.fedavg
        assert fedsuite.strategies.fedavg.FedAvg is halves[0]  # one class, however it is reached
    print(json.dumps({
        "installed": installed, "loaded": [h.__module__ for h in halves],
        "files": [sys.modules[h.__module__].__file__ for h in halves[:2]],
        "top_level": [n for n in ("strategies", "clients", "simulation") if importlib.util.find_spec(n)],
    }))
"""
SPEED_HALVES = ["fedsuite.strategies.fedspeed", "fedsuite.clients.fadamgt"]  # modules that import a sibling
# A two-round federation in this process, on the synthetic least-squares task.
RUN = """
    import json
    import fedsuite
    from fedsuite.run.inprocess import run_inprocess
    strategy = run_inprocess({{"algorithm": "{algorithm}", "dataset": "synthetic-lsq", "num-clients": 4,
                               "clients-per-round": 2, "synthetic-dim": 3, "synthetic-samples": 8,
                               "num-server-rounds": 2, "eval-every": 1000}})
    print(json.dumps({{"rule": type(strategy.rule).__module__, "x": strategy.x.tolist(),
                       "fedsuite": list(fedsuite.__path__)}}))
"""


def test_an_installed_wheel_runs_from_any_folder_without_top_level_halves(wheel, tmp_path):
    python = throwaway_venv(tmp_path)
    install = [python, *PIP, "install", "--no-deps", "--no-index", "--force-reinstall", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT)
    elsewhere = tmp_path / "user_project"
    (elsewhere / "clients").mkdir(parents=True)  # a user's own `clients` package, which fedsuite's must not shadow
    (elsewhere / "clients" / "__init__.py").write_text("")
    run = run_in(python, elsewhere, "\n    import fedsuite.app" + RUN.format(algorithm="scaffold"))
    assert run["rule"] == "fedsuite.strategies.scaffold" and len(run["x"]) == 3
    assert all(str(ROOT) not in p and str(tmp_path / "venv") in p for p in run["fedsuite"])
    where = run_in(python, elsewhere, WHERE)
    assert where["installed"] and where["top_level"] == ["clients"]  # the user's own; fedsuite installs none
    assert where["loaded"] == ["fedsuite.strategies.fedavg", "fedsuite.clients.fedavg", *SPEED_HALVES]
    assert [Path(f).parts[-4:] for f in where["files"]] == [
        ("site-packages", "fedsuite", "strategies", "fedavg.py"),
        ("site-packages", "fedsuite", "clients", "fedavg.py"),
    ]


def test_the_editable_install_ci_makes_maps_both_halves_under_fedsuite(tmp_path):
    checkout = checkout_copy(tmp_path)
    python = throwaway_venv(tmp_path)
    install = [python, *PIP, "install", "--no-deps", "--no-build-isolation", "-e", f"{checkout}[dev]"]
    subprocess.run(install, check=True, capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT)
    for cwd in (checkout, tmp_path):
        where = run_in(python, cwd, WHERE)
        assert where["installed"] and where["loaded"] == ["fedsuite.strategies.fedavg", "fedsuite.clients.fedavg",
                                                          *SPEED_HALVES]  # fmt: skip
        assert where["files"] == [str(checkout / "strategies" / "fedavg.py"), str(checkout / "clients" / "fedavg.py")]
        # the checkout's own folders are importable from its root (python -m simulation.run), nowhere else
        assert where["top_level"] == (["strategies", "clients", "simulation"] if cwd == checkout else [])


def test_an_app_bundle_where_fedsuite_is_not_installed_runs_on_its_own_folders(tmp_path):
    from flwr.cli.build import build_fab_from_disk

    bundle = tmp_path / "fab"
    with zipfile.ZipFile(io.BytesIO(build_fab_from_disk(ROOT))) as fab:
        fab.extractall(bundle)
    python = throwaway_venv(tmp_path)  # only the dependencies, as in the deployment and docker images
    run = run_in(python, bundle, RUN.format(algorithm="fedspeed"))  # Flower puts the bundle's folder on sys.path
    assert run["rule"] == "strategies.fedspeed" and run["fedsuite"] == [str(bundle / "fedsuite")]
    where = run_in(python, bundle, WHERE)
    assert not where["installed"]
    assert where["loaded"] == ["strategies.fedavg", "clients.fedavg", "strategies.fedspeed", "clients.fadamgt"]
    assert where["files"] == [str(bundle / "strategies" / "fedavg.py"), str(bundle / "clients" / "fedavg.py")]
