"""A simulation on a Ray cluster (docs/running/scale.md), on one machine: a head and a second Ray node started with
`ray start`, 1 CPU each with a resource of their own; `simulation.run` reaches the cluster through Flower's Ray backend
(RAY_ADDRESS in its environment; Flower's `ray.init()` then joins the cluster instead of starting Ray), and client state
goes to a folder both nodes see. Every process of the cluster carries a token of its own in its environment and is
stopped by it at the end (never `ray stop`, which would stop every Ray process on the machine)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fedsuite.results.folder import RUN_TOKEN_ENV
from fedsuite.run.inprocess import run_inprocess
from simulation.launcher import launch as sim
from simulation.launcher.processes import new_token, stop_tagged

RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def alive_nodes(address: str, env: dict) -> list[dict]:
    code = (f"import json, ray; ray.init(address={address!r}, logging_level='ERROR'); "
            "print(json.dumps([n['Resources'] for n in ray.nodes() if n['Alive']]))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else []


def test_a_simulation_uses_a_two_node_ray_cluster(tmp_path, monkeypatch):
    token = new_token()
    env = {**os.environ, RUN_TOKEN_ENV: token, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    address = f"127.0.0.1:{free_port()}"
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must stay < 108 chars
    try:
        subprocess.run([RAY, "start", "--head", f"--port={address.split(':')[1]}", "--node-ip-address=127.0.0.1",
                        "--num-cpus=1", '--resources={"head-node": 1}', f"--temp-dir={ray_tmp}",
                        "--include-dashboard=false", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)  # fmt: skip
        subprocess.run([RAY, "start", f"--address={address}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                        '--resources={"second-node": 1}', "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=180)  # fmt: skip
        deadline = time.monotonic() + 60
        while len(nodes := alive_nodes(address, env)) < 2 and time.monotonic() < deadline:
            time.sleep(1)
        assert len(nodes) == 2 and {"head-node", "second-node"} <= {k for n in nodes for k in n}

        shared = tmp_path / "shared-state"  # a path every node sees (here: the one machine's disk)
        cfg = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 8, "clients-per-round": 4,
               "num-server-rounds": 3, "local-steps": 5, "batch-size": 10, "lr": 0.02, "eval-every": 1000,
               "client-state": "disk", "client-state-dir": str(shared)}  # fmt: skip
        monkeypatch.setenv("RAY_ADDRESS", address)
        folder = sim.run({**cfg, "out-dir": str(tmp_path), "run-name": "cluster"}, quiet=True, supernodes=2)
        monkeypatch.delenv("RAY_ADDRESS")
        # Flower's client workers ran in the cluster (a private Ray would log elsewhere): two, each taking 1 CPU of
        # a node that has 1, so one on each node.
        actors = [p for p in Path(ray_tmp).rglob("worker-*.out") if b":actor_name:ClientAppActor" in p.read_bytes()]
        assert len(actors) == 2, "the client workers did not run on the cluster's two nodes"
        assert len(list(shared.glob("partition-*.state"))) >= 4  # trained clients wrote their state there
        error = json.loads((folder / "rounds.jsonl").read_text().splitlines()[-1])["relative_error"]
        shared_copy = tmp_path / "inprocess-state"
        direct = run_inprocess({**cfg, "client-state-dir": str(shared_copy)})
        assert error == pytest.approx(direct.plan.evaluate(direct.x)["relative_error"], rel=1e-6)
    finally:
        stop_tagged(token)
        shutil.rmtree(ray_tmp, ignore_errors=True)
