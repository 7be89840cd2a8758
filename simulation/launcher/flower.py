"""The Flower processes' surroundings: the `flwr` command, their environment (quiet Flower, the launch's token,
a private FLWR_HOME, ports and Ray folder), the federation's size, and what `flwr ls` says of a run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from fedsuite.config.run_config import Config, ConfigError
from fedsuite.results.folder import RUN_TOKEN_ENV
from simulation.launcher.project import PROJECT

QUIET_FLOWER = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",  # silences Ray's FutureWarning about it, on every worker
}


def flwr_executable() -> str:
    """`flwr` next to the interpreter running this (a venv used without activating it), else on PATH."""
    beside = Path(sys.executable).parent / "flwr"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("flwr")
    if found:
        return found
    raise ConfigError(f"the flwr command was found neither next to {sys.executable} nor on PATH; install the "
                      "project into this interpreter's environment (pip install -e .)")  # fmt: skip


def private_ray_dir() -> Path | None:
    """A fresh folder for Ray's session files (RAY_TMPDIR), so the launch's Ray processes can be told by the files
    they hold open (simulation.launcher.processes) and their logs go with the launch; None where the user set RAY_TMPDIR
    or RAY_ADDRESS (a cluster), or where the temp folder's path is too long for Ray's sockets (107 bytes)."""
    if os.environ.get("RAY_TMPDIR") or os.environ.get("RAY_ADDRESS"):
        return None
    for base in (tempfile.gettempdir(), "/tmp"):
        # <dir>/ray/session_<date>_<time>_<µs>_<pid>/sockets/plasma_store must fit a socket address
        if len(base) + len("/fedsuite-ray-xxxxxxxx") + 70 <= 107 and os.access(base, os.W_OK):
            return Path(tempfile.mkdtemp(prefix="fedsuite-ray-", dir=base))
    return None


def flower_env(token: str, flwr_home: Path, ray_dir: Path | None = None) -> dict[str, str]:
    """The launch's environment: quiet Flower, the token, a private FLWR_HOME with two free ports, a private Ray
    folder, and this interpreter's bin folder first on PATH (flwr starts flower-superlink by name)."""
    env = dict(os.environ)
    env.update(QUIET_FLOWER)
    env[RUN_TOKEN_ENV] = token
    env["FLWR_HOME"] = str(flwr_home)
    if ray_dir is not None:
        env["RAY_TMPDIR"] = str(ray_dir)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    socks = [socket.socket() for _ in range(2)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"], env["FLWR_LOCAL_CONTROL_API_PORT"] = (
        str(sock.getsockname()[1]) for sock in socks
    )
    for sock in socks:
        sock.close()
    return env


def run_status(flwr: str, run_id: str, env: dict[str, str]) -> str:
    res = subprocess.run([flwr, "ls", "--run-id", run_id, "--format", "json"], capture_output=True, text=True,
                         env=env, cwd=PROJECT, timeout=60)  # fmt: skip
    try:
        return json.loads(res.stdout)["runs"][0]["status"]
    except (ValueError, KeyError, IndexError):
        return f"unknown ({res.stdout.strip() or res.stderr.strip()})"


def federation_size(cfg: Config, cpus_per_client: float, gpus_per_client: float) -> int:
    """SuperNodes for the simulation: one per client with client-mapping='fixed'; else as many as client workers
    run at once (Ray's actors: CPU cores / CPU share, and GPUs / GPU share), at most N. The number of clients
    does not enter: a SuperNode trains whichever partitions the server names."""
    n = int(cfg["num-clients"])
    if cfg["client-mapping"] == "fixed":
        return n
    workers = max(1, int((os.cpu_count() or 1) / max(cpus_per_client, 1e-9)))
    if gpus_per_client:
        workers = min(workers, max(1, int(gpu_count() / gpus_per_client)))
    return max(1, min(n, workers))


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False
