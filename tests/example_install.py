"""An example plug-in installed like any package, for the tests that run it in child processes: copied to a
temporary folder and `pip install --target`ed there, nothing installed into the venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

CHILD_TIMEOUT = 240


def installed_example(example: Path, base: Path) -> Iterator[tuple[dict, Path]]:
    """Yields (environment of child processes that see the example installed, its source copy); removes both after."""
    source, site = base / "source", base / "site"
    shutil.copytree(example, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-input", "-q"]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, capture_output=True, timeout=CHILD_TIMEOUT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    yield env, source
    shutil.rmtree(base, ignore_errors=True)
