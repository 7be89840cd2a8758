"""The Flower app's project: its folder (what `flwr run` bundles) and its run-config table in pyproject.toml, and
paths as the user gives them (relative to the working folder)."""

from __future__ import annotations

import tomllib
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent.parent


def pyproject_defaults(project: Path = PROJECT) -> dict:
    return tomllib.loads((project / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def absolute(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (Path.cwd() / p).resolve()
