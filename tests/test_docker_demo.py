"""The docker-compose demo for real (marked `deploy`; .ci/run's deployment stage): build the image, bring the
compose project up (TLS + SuperNode auth), train a short experiment from the host's flwr CLI, check its results,
tear everything down. Containers talk on the compose project's own network; the SuperLink is published on
127.0.0.1 only. Needs a running Docker engine, a working Docker Compose (the `docker compose` plugin or docker-compose
v1, each found by its `version` command), the base image named by FEDSUITE_DOCKER_BASE (default
fedsuite-base:bookworm, built by .ci/run), the image's wheels in docker/wheels/ (docker/fetch-wheels) and Debian's
Fashion-MNIST; a missing one skips these tests with its reason. Each test builds and runs containers for minutes.

Two layouts: the dataset shared by every container (partitions of Fashion-MNIST), and node-only data (each ClientApp
container mounts its own table folder and nothing else, the ServerApp container has none, server-data=false)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.test_compose_flags import NO_COMPOSE, compose_command

PROJECT = Path(__file__).resolve().parent.parent
DEMO = PROJECT / "docker" / "demo"
BASE = os.environ.get("FEDSUITE_DOCKER_BASE", "fedsuite-base:bookworm")
DATA = Path("/usr/share/datasets/fashion-mnist")


def why_not() -> str | None:
    if not shutil.which("docker"):
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "no Docker engine answers"
    if compose_command() is None:
        return NO_COMPOSE
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True).returncode != 0:
        return f"base image {BASE} not built (.ci/run builds it with debootstrap)"
    if not any((PROJECT / "docker" / "wheels").glob("*.whl")):
        return "docker/wheels/ holds no wheels: run docker/fetch-wheels"
    if not (DATA / "train-images-idx3-ubyte.gz").exists():
        return "Debian's dataset-fashion-mnist is not installed"
    return None


pytestmark = [pytest.mark.deploy, pytest.mark.skipif(why_not() is not None, reason=str(why_not()))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_env(tmp_path, project: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "DEMO_DIR": str(tmp_path), "BASE_IMAGE": BASE, "COMPOSE_PROJECT_NAME": project,
            "SUPERLINK_PORT": str(free_port()), "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""), **extra}  # fmt: skip


def demo_command(env: dict[str, str]):
    def demo(*args: str, timeout: float) -> subprocess.CompletedProcess:
        res = subprocess.run([str(DEMO), *args], capture_output=True, text=True, env=env, timeout=timeout)
        print(res.stdout[-3000:], res.stderr[-3000:])
        return res

    return demo


def containers(project: str, service: str) -> list[dict]:
    labels = ["--filter", f"label=com.docker.compose.project={project}",
              "--filter", f"label=com.docker.compose.service={service}"]  # fmt: skip
    cid = subprocess.run(["docker", "ps", "-q", *labels], capture_output=True, text=True).stdout.split()
    return json.loads(subprocess.run(["docker", "inspect", *cid], capture_output=True, text=True).stdout or "[]")


def data_mounts(project: str, service: str) -> list[dict]:
    return [m for c in containers(project, service) for m in c["Mounts"] if m["Destination"] == "/data"]


def clientapp_pids(project: str, service: str) -> set[str]:
    """The process ids of the flwr-clientapp processes running in the service's container."""
    (container,) = containers(project, service)
    top = subprocess.run(["docker", "top", container["Id"], "-o", "pid,args"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in top.splitlines() if "flwr-clientapp" in line}


def wait_until(predicate, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.stdout.read()[-4000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def check_the_image(image: str) -> None:
    """resnet18-gn's torchvision topology builds in the image, which holds no wheel of its build and whose user is
    not root."""
    probe = ("import glob, torch.nn as nn; from torchvision.models import resnet18; "
             "resnet18(num_classes=10, norm_layer=lambda c: nn.GroupNorm(2, c)); "
             "print([w for d in ('/tmp', '/opt') for w in glob.glob(d + '/**/*.whl', recursive=True)])")  # fmt: skip
    res = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python", image, "-c", probe], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr[-3000:]
    user = subprocess.run(["docker", "image", "inspect", "--format", "{{.Config.User}}", image], capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    assert user and user not in ("root", "0")


def tear_down(demo, project: str) -> None:
    down = demo("down", timeout=300)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                          capture_output=True, text=True)  # fmt: skip
    assert down.returncode == 0 and not left.stdout.strip(), down.stderr


def test_compose_demo_trains_with_tls_and_node_auth(tmp_path):
    """The shared dataset; no container runs as root. SuperNode 1 is restarted while its round-1 ClientApp runs in
    its own SuperExec container: that ClientApp's reply is lost (the restarted SuperNode refuses its task token, the
    one error docs/deployment/docker.md explains), round 1 counts node 2's reply, node 1 trains again in round 2."""
    project = "fsdemo" + uuid.uuid4().hex[:6]
    env = demo_env(tmp_path, project)
    demo = demo_command(env)
    try:
        up = demo("up", timeout=900)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert "2 SuperNodes online" in up.stdout
        data = data_mounts(project, "superexec-clientapp-1")
        assert data and not data[0]["RW"]  # the dataset is mounted read-only
        user = "49999:49999" if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"
        services = ("superlink", "superexec-serverapp", "supernode-1", "supernode-2", "superexec-clientapp-1",
                    "superexec-clientapp-2")  # fmt: skip
        assert [c["Config"]["User"] for s in services for c in containers(project, s)] == [user] * len(services)
        (node,) = containers(project, "supernode-1")
        check_the_image(node["Config"]["Image"])

        # a round-timeout bounds the wait for the lost reply, should the restarted SuperNode's refusal of the old
        # ClientApp's token not reach the server as an error (it then counts as the same failure)
        run = subprocess.Popen([str(DEMO), "run", "-c", "num-server-rounds=2 round-timeout=180.0"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        # the first ClientApp answers the partition query of client-mapping='fixed'; the second trains round 1
        first: set[str] = set()
        wait_until(lambda: first.update(clientapp_pids(project, "superexec-clientapp-1")) or first, run)
        wait_until(lambda: clientapp_pids(project, "superexec-clientapp-1") - first, run)
        subprocess.run(["docker", "restart", node["Id"]], check=True, capture_output=True, timeout=120)
        out, _ = run.communicate(timeout=600)
        print(out[-3000:])
        assert run.returncode == 0, out[-4000:]
        (folder,) = (tmp_path / "results").glob("demo-*")
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["rounds_completed"] == 2
        assert summary["final_accuracy"] > 0.6  # a 2NN on Fashion-MNIST, 2 clients, 2 rounds
        rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
        assert [(r["replies"], r["failures"]) for r in rows[1:]] == [(1, 1), (2, 0)]
        logs = subprocess.run(["docker", "logs", node["Id"]], capture_output=True, text=True)
        log = logs.stdout + logs.stderr
        assert "[ApiError:1008] Runtime task-token authentication failed." in log
        print("round seconds:", [r["round_seconds"] for r in rows[1:]])
    finally:
        tear_down(demo, project)


def write_site(folder: Path, train_rows: int, labels: tuple[int, ...], seed: int) -> None:
    """One client's own table: train.csv and test.csv, features shifted by the label (learnable)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for split, n in (("train", train_rows), ("test", 12)):
        y = rng.choice(labels, n)
        x = rng.normal(size=(n, 3)) + 2.0 * y[:, None]
        pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "label": y}).to_csv(
            folder / f"{split}.csv", index=False
        )


def test_compose_demo_with_data_only_on_the_nodes(tmp_path):
    """FEDSUITE_NODE_DATA: each ClientApp container mounts only its own folder, the ServerApp container an empty
    one; the run (server-data=false, federated evaluation) completes with the nodes' test metrics."""
    sites = [tmp_path / "site-a", tmp_path / "site-b"]
    write_site(sites[0], 60, (0, 1), seed=1)
    write_site(sites[1], 90, (1, 2), seed=2)
    project = "fsnodes" + uuid.uuid4().hex[:6]
    demo = demo_command(demo_env(tmp_path / "demo", project, FEDSUITE_NODE_DATA=f"{sites[0]},{sites[1]}"))
    try:
        up = demo("up", timeout=900)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        for i, site in enumerate(sites, start=1):
            (mount,) = data_mounts(project, f"superexec-clientapp-{i}")
            assert mount["Source"] == str(site) and not mount["RW"]  # its own folder only
        (server,) = data_mounts(project, "superexec-serverapp")
        assert not any(Path(server["Source"]).iterdir())  # the ServerApp sees no data
        run = demo("run", "-c", "num-server-rounds=2 input-shape='3' num-classes=3", timeout=600)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
        (folder,) = (tmp_path / "demo" / "results").glob("demo-*")
        rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
        assert [r["replies"] for r in rows[1:]] == [2, 2]
        assert all(sorted(r["fed_client_accuracy"]) == ["0", "1"] for r in rows[1:])  # each node tested its own
        assert all(r["fed_failures"] == 0 and 0.0 <= r["fed_accuracy"] <= 1.0 for r in rows[1:])
        print("round seconds:", [r["round_seconds"] for r in rows[1:]])
    finally:
        tear_down(demo, project)
