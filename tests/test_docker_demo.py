"""The docker-compose demo for real (marked `deploy`; .ci/run's deployment stage): build the image, bring the
compose project up (TLS + SuperNode auth), train a short experiment from the host's flwr CLI, check its results,
tear everything down. Containers talk on the compose project's own network; the SuperLink is published on
127.0.0.1 only. Needs a running Docker engine, docker-compose (or the compose plugin), the base image named by
FEDSUITE_DOCKER_BASE (default fedsuite-base:bookworm, built by .ci/run) and Debian's Fashion-MNIST."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
DEMO = PROJECT / "docker" / "demo"
BASE = os.environ.get("FEDSUITE_DOCKER_BASE", "fedsuite-base:bookworm")
DATA = Path("/usr/share/datasets/fashion-mnist")


def why_not() -> str | None:
    if not shutil.which("docker"):
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "no Docker engine answers"
    if not shutil.which("docker-compose") and subprocess.run(["docker", "compose", "version"],
                                                             capture_output=True).returncode != 0:  # fmt: skip
        return "neither docker-compose nor the compose plugin"
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True).returncode != 0:
        return f"base image {BASE} not built (.ci/run builds it with debootstrap)"
    if not (DATA / "train-images-idx3-ubyte.gz").exists():
        return "Debian's dataset-fashion-mnist is not installed"
    return None


pytestmark = [pytest.mark.deploy, pytest.mark.skipif(why_not() is not None, reason=str(why_not()))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compose_demo_trains_with_tls_and_node_auth(tmp_path):
    project = "fsdemo" + uuid.uuid4().hex[:6]
    env = {**os.environ, "DEMO_DIR": str(tmp_path), "BASE_IMAGE": BASE, "COMPOSE_PROJECT_NAME": project,
           "SUPERLINK_PORT": str(free_port()), "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}  # fmt: skip

    def demo(*args: str, timeout: float) -> subprocess.CompletedProcess:
        res = subprocess.run([str(DEMO), *args], capture_output=True, text=True, env=env, timeout=timeout)
        print(res.stdout[-3000:], res.stderr[-3000:])
        return res

    try:
        up = demo("up", timeout=900)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert "2 SuperNodes online" in up.stdout
        labels = ["--filter", f"label=com.docker.compose.project={project}",
                  "--filter", "label=com.docker.compose.service=superexec-clientapp-1"]  # fmt: skip
        cid = subprocess.run(["docker", "ps", "-q", *labels], capture_output=True, text=True).stdout.split()
        inspect = subprocess.run(["docker", "inspect", *cid], capture_output=True, text=True).stdout
        data = [m for c in json.loads(inspect or "[]") for m in c["Mounts"] if m["Destination"] == "/data"]
        assert data and not data[0]["RW"]  # the dataset is mounted read-only
        run = demo("run", "-c", "num-server-rounds=2", timeout=600)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
        (folder,) = (tmp_path / "results").glob("demo-*")
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["rounds_completed"] == 2
        assert summary["final_accuracy"] > 0.6  # a 2NN on Fashion-MNIST, 2 clients, 2 rounds
        rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
        assert [r["replies"] for r in rows[1:]] == [2, 2]
        print("round seconds:", [r["round_seconds"] for r in rows[1:]])
    finally:
        down = demo("down", timeout=300)
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                              capture_output=True, text=True)  # fmt: skip
        assert down.returncode == 0 and not left.stdout.strip(), down.stderr
