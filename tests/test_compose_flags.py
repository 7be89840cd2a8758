"""Static check of the Docker demo: every flag that docker/compose.yml passes to a Flower executable is one that the
installed Flower accepts (it appears in that executable's --help), so a Flower upgrade that renames or drops a
flag fails here, not in a user's `docker compose up`. The deploy/ scripts' Flower flags are checked the same way.

What each container mounts is checked with `compose config` (no engine needed) where Docker Compose works: the
`docker compose` plugin or a `docker-compose` v1 binary, each found by running its `version` command (a `docker` CLI
without the plugin rejects `docker compose -f …`); without either that test is skipped and says why."""

from __future__ import annotations

import functools
import os
import re
import shutil
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


NO_COMPOSE = (
    "no Docker Compose: `docker compose version` fails (no docker CLI, or one without the compose plugin) and no "
    "working `docker-compose` (v1); install the plugin or docker-compose to run this check"
)


def compose_command(path: str | None = None) -> list[str] | None:
    """The Docker Compose command that works on `path` (default: $PATH), as docker/demo picks it: the `docker compose`
    plugin, else a `docker-compose` v1 binary; None when neither answers its `version` command."""
    path = os.environ.get("PATH", "") if path is None else path
    for program in (["docker", "compose"], ["docker-compose"]):
        exe = shutil.which(program[0], path=path)
        if not exe:
            continue
        try:
            res = subprocess.run([exe, *program[1:], "version"], capture_output=True, timeout=60,
                                 env={**os.environ, "PATH": path})  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if res.returncode == 0:
            return [exe, *program[1:]]
    return None


@functools.cache
def compose_here() -> list[str] | None:
    return compose_command()


def compose_config(**env: str) -> dict:
    """docker/compose.yml as compose interpolates it under `env` (no engine needed)."""
    program = compose_here()
    assert program, NO_COMPOSE
    res = subprocess.run([*program, "-f", str(PROJECT / "docker" / "compose.yml"), "config"], capture_output=True,
                         text=True, timeout=120, env={"PATH": os.environ.get("PATH", ""), **env})  # fmt: skip
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def data_source(service: dict) -> str:
    for volume in service.get("volumes", []):
        text = volume if isinstance(volume, str) else f"{volume['source']}:{volume['target']}"
        if ":/data" in text:
            return text.split(":/data")[0]
    return ""


@pytest.mark.skipif(compose_here() is None, reason=NO_COMPOSE)
def test_node_only_data_mounts_each_folder_into_one_clientapp_only():
    """What docker/demo exports for FEDSUITE_NODE_DATA: ClientApp N mounts folder N at /data, the ServerApp the
    empty folder, and both SuperNodes tell their ClientApps data-dir='/data'; without it, one shared dataset."""
    node_only = compose_config(FEDSUITE_CLIENT_DATA_1="/srv/a", FEDSUITE_CLIENT_DATA_2="/srv/b",
                               FEDSUITE_SERVER_DATA="/srv/empty", FEDSUITE_NODE_CONFIG=" data-dir='/data'")  # fmt: skip
    node_only = node_only["services"]
    assert data_source(node_only["superexec-clientapp-1"]) == "/srv/a"
    assert data_source(node_only["superexec-clientapp-2"]) == "/srv/b"
    assert data_source(node_only["superexec-serverapp"]) == "/srv/empty"
    assert not data_source(node_only["superlink"]) and not data_source(node_only["supernode-1"])
    for i in (0, 1):
        (node_config,) = [a for a in node_only[f"supernode-{i + 1}"]["command"] if a.startswith("--node-config=")]
        assert (
            node_config == f"--node-config=partition-id={i} num-partitions=2 client-state-dir='/state' data-dir='/data'"
        )
    shared = compose_config()["services"]
    sources = {
        data_source(shared[s]) for s in ("superexec-serverapp", "superexec-clientapp-1", "superexec-clientapp-2")
    }
    assert sources == {"/usr/share/datasets/fashion-mnist"}
    assert all("data-dir" not in " ".join(shared[f"supernode-{i}"]["command"]) for i in (1, 2))
