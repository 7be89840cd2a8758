"""Run one experiment through `flwr run` (Ray simulation) and fail loudly when it fails.

    python -m simulation.run -c "algorithm='fedprox' prox-mu=0.01 num-server-rounds=20"

What it adds to a bare `flwr run . --stream`:
- the run config is validated here first, and the dataset and partition are built once (preflight), so a
  bad key, missing files or an infeasible partition stop in seconds, not after Ray's cold start;
- the federation gets one SuperNode per client (`num-supernodes = num-clients`) and CPU/GPU shares;
- the exit code is the run's real status (`flwr run --stream` exits 0 on a failed run), checked with
  `flwr ls --run-id … --format json` and the run's summary.json;
- the local SuperLink that `flwr run` leaves behind is stopped if this command started it, and it gets
  ports of its own, so runs from different FLWR_HOMEs can go on at the same time;
- Flower's telemetry, update check and runtime dependency installation are switched off.
Prints the results folder as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from fedsuite.config import ConfigError, resolve

PROJECT = Path(__file__).resolve().parent.parent
QUIET_FLOWER = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}


class RunFailed(RuntimeError):
    pass


def pyproject_defaults(project: Path = PROJECT) -> dict:
    return tomllib.loads((project / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def parse_overrides(overrides: list[str]) -> dict:
    from flwr.common.config import parse_config_args

    return parse_config_args(overrides) if overrides else {}


def preflight(cfg, quiet: bool = False) -> None:
    """Load the dataset and build the partition in this process (errors name the key to change); print
    the client-state estimate of stateful algorithms."""
    from fedsuite import registry, state
    from fedsuite.data import client_partition, load_dataset
    from fedsuite.server_app import initial_model

    dataset = load_dataset(cfg)
    client_partition(cfg, dataset)
    vectors = registry.ALGORITHMS[str(cfg["algorithm"])].client_state_vectors(cfg)
    if vectors and not quiet:
        dim = initial_model(cfg, dataset).size
        budget = float(cfg["client-state-budget-mb"])
        print(state.describe(str(cfg["client-state"]), int(cfg["num-clients"]), dim, vectors, budget), flush=True)


def flower_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(QUIET_FLOWER)
    return env


def local_superlinks(flwr_home: Path) -> list[int]:
    """PIDs of local simulation SuperLinks whose database lives under this FLWR_HOME."""
    out = subprocess.run(["pgrep", "-f", "flower-superlink"], capture_output=True, text=True).stdout.split()
    pids = []
    for pid in out:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "--simulation" in cmd and str(flwr_home / "local-superlink") in cmd:
            pids.append(int(pid))
    return pids


def superlink_ports(env: dict[str, str], flwr_home: Path) -> dict[str, str]:
    """Ports for the local SuperLink: the ones this FLWR_HOME's running SuperLink uses, else two free ones.

    Flower's defaults (39091/39093) are shared by every FLWR_HOME, so two concurrent runs from different
    folders would otherwise talk to one SuperLink (and one would stop the other's)."""
    keys = ("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "FLWR_LOCAL_CONTROL_API_PORT")
    if all(k in env for k in keys):
        return {k: env[k] for k in keys}
    for pid in local_superlinks(flwr_home):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        if "--port" in args and "--control-api-address" in args:
            http = args[args.index("--port") + 1]
            control = args[args.index("--control-api-address") + 1].rsplit(":", 1)[1]
            return dict(zip(keys, (http, control), strict=True))
    socks = [socket.socket() for _ in keys]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = {k: str(sock.getsockname()[1]) for k, sock in zip(keys, socks, strict=True)}
    for sock in socks:
        sock.close()
    return ports


def stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.2)


def run_status(run_id: str, env: dict[str, str]) -> str:
    res = subprocess.run(
        ["flwr", "ls", "--run-id", run_id, "--format", "json"], capture_output=True, text=True, env=env, cwd=PROJECT
    )
    try:
        return json.loads(res.stdout)["runs"][0]["status"]
    except (ValueError, KeyError, IndexError):
        return f"unknown ({res.stdout.strip() or res.stderr.strip()})"


def run(
    overrides: dict,
    cpus_per_client: float = 1.0,
    gpus_per_client: float | None = None,
    keep_superlink: bool = False,
    quiet: bool = False,
    check_data: bool = True,
) -> Path:
    """Validate, run through `flwr run`, check the outcome; returns the results folder or raises."""
    overrides = dict(overrides)
    cfg = resolve({**pyproject_defaults(), **overrides})  # raises ConfigError before anything starts
    if check_data:
        preflight(cfg, quiet)
    out_dir = Path(str(cfg["out-dir"])).expanduser()
    overrides["out-dir"] = str(out_dir if out_dir.is_absolute() else (Path.cwd() / out_dir).resolve())
    if not cfg["run-name"]:
        overrides["run-name"] = f"{cfg['algorithm']}-{cfg['dataset']}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder = Path(overrides["out-dir"]) / str(overrides.get("run-name") or cfg["run-name"])
    if gpus_per_client is None:
        gpus_per_client = 0.25 if _cuda_visible() and cfg["device"] != "cpu" else 0.0
    federation = f"num-supernodes={cfg['num-clients']} client-resources-num-cpus={cpus_per_client:g}"
    if gpus_per_client:
        federation += f" client-resources-num-gpus={gpus_per_client:g}"
    env = flower_env()
    flwr_home = Path(env.get("FLWR_HOME", Path.home() / ".flwr"))
    already_running = local_superlinks(flwr_home)
    env.update(superlink_ports(env, flwr_home))
    config_arg = " ".join(f"{k}={_toml(v)}" for k, v in overrides.items())
    cmd = ["flwr", "run", str(PROJECT), "--stream", "--federation-config", federation]
    if config_arg:
        cmd += ["-c", config_arg]
    if not quiet:
        print("$ " + shlex.join(cmd), flush=True)
    run_id = None
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=PROJECT)
        for line in proc.stdout:
            if not quiet:
                sys.stdout.write(line)
                sys.stdout.flush()
            found = re.search(r"Successfully started run (\d+)", line)
            run_id = run_id or (found.group(1) if found else None)
        proc.wait()
        if run_id is None:
            raise RunFailed(f"flwr run did not start a run (exit code {proc.returncode})")
        status = run_status(run_id, env)
        if status != "finished:completed":
            raise RunFailed(f"run {run_id} ended with status {status}; see the log above")
        summary = json.loads((folder / "summary.json").read_text())
        if summary.get("status") != "completed":
            raise RunFailed(f"run {run_id}: {folder}/summary.json says status={summary.get('status')}")
    finally:
        if not keep_superlink:
            stop([p for p in local_superlinks(flwr_home) if p not in already_running])
    return folder


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)


def _cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--run-config", action="append", default=[], help="key=value overrides (TOML values)")
    parser.add_argument("--cpus-per-client", type=float, default=1.0, help="Ray CPUs per virtual client")
    parser.add_argument("--gpus-per-client", type=float, default=None, help="GPU share per client (0.25 if CUDA)")
    parser.add_argument("--keep-superlink", action="store_true", help="leave the local SuperLink running")
    parser.add_argument("--check", action="store_true", help="only validate the run config, data and partition")
    parser.add_argument("--no-preflight", action="store_true", help="skip loading data/partition before the run")
    args = parser.parse_args(argv)
    try:
        overrides = parse_overrides(args.run_config)
        if args.check:
            preflight(resolve({**pyproject_defaults(), **overrides}))
            print("run config, data and partition OK")
            return 0
        folder = run(
            overrides,
            args.cpus_per_client,
            args.gpus_per_client,
            args.keep_superlink,
            check_data=not args.no_preflight,
        )
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"results: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
