"""Static check of the Docker demo: every flag that docker/compose.yml passes to a Flower executable is one that the
installed Flower accepts (it appears in that executable's --help), so a Flower upgrade that renames or drops a
flag fails here, not in a user's `docker compose up`. The deploy/ scripts' Flower flags are checked the same way."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parent.parent
COMPOSE_FILES = sorted((PROJECT / "docker").glob("compose*.yml"))
FLOWER = {"flower-superlink", "flower-supernode", "flower-superexec", "flwr"}


@functools.cache
def help_text(program: str) -> str:
    exe = Path(sys.executable).parent / program
    res = subprocess.run([str(exe if exe.exists() else program), "--help"], capture_output=True, text=True,
                         timeout=120, env={"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                                           "PATH": "/usr/bin:/bin", "COLUMNS": "200"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout


def flags(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def command_lines() -> list[tuple[str, str, list[str]]]:
    out = []
    for path in COMPOSE_FILES:
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            entry = service.get("entrypoint") or []
            entry = entry.split() if isinstance(entry, str) else list(entry)
            command = service.get("command") or []
            command = command.split() if isinstance(command, str) else list(command)
            if entry and Path(entry[0]).name in FLOWER:
                out.append((f"{path.name}:{name}", Path(entry[0]).name, entry[1:] + command))
    return out


def test_the_compose_files_run_every_flower_role():
    programs = {program for _, program, _ in command_lines()}
    assert COMPOSE_FILES and programs == {"flower-superlink", "flower-supernode", "flower-superexec"}


@pytest.mark.parametrize(("where", "program", "args"), command_lines(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_compose_flag_is_accepted_by_flower(where, program, args):
    text = help_text(program)
    unknown = [f for f in flags(args) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]
    assert not unknown, f"{where}: {program} --help does not list {unknown}"
    assert "--insecure" not in args or program == "flower-superexec", f"{where}: TLS must stay on"


def test_every_flower_flag_in_the_deploy_scripts_is_accepted():
    """deploy/superlink and deploy/supernode build their command lines in `args=(...)` / `args+=(...)` arrays."""
    for script, program in (("superlink", "flower-superlink"), ("supernode", "flower-supernode")):
        text = (PROJECT / "deploy" / script).read_text()
        used = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", " ".join(re.findall(r"args\+?=\(([^)]*)\)", text))))
        assert used, script
        unknown = [f for f in sorted(used) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", help_text(program))]
        assert not unknown, f"deploy/{script}: {program} --help does not list {unknown}"
