"""One run through `flwr run`: validated, its results folder claimed, the Flower processes started with a reaper
beside them, watched to the end and stopped together on a signal; returns the results folder or raises how the run
ended (simulation.launcher.outcome)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fedsuite.config.presets import describe as describe_config
from fedsuite.config.presets import expand as expand_preset
from fedsuite.config.run_config import Config, ConfigError, resolve
from fedsuite.results.folder import (
    RUN_TOKEN_ENV,
    ResultsFolderTaken,
    claim_folder,
    default_run_name,
    is_disk_full,
    mark_stopped,
)
from fedsuite.results.tracking import tracking_errors
from fedsuite.run.stop_note import leave_stop_note
from fedsuite.state.plan import DEVICE_NEEDS_ONE_PROCESS
from simulation.launcher.console import LaunchLog, stream
from simulation.launcher.flower import (
    cuda_visible,
    federation_size,
    flower_env,
    flwr_executable,
    private_ray_dir,
    run_status,
)
from simulation.launcher.outcome import SIGNAL_EXIT, Interrupted, RunFailed, outcome, raise_interrupted
from simulation.launcher.overrides import flower_overrides, toml_value
from simulation.launcher.preflight import check_writable, preflight
from simulation.launcher.processes import Launch, new_token
from simulation.launcher.project import PROJECT, absolute, pyproject_defaults
from simulation.launcher.resume import check_resume, resumed_overrides


@dataclass
class Started:
    """What one launch runs with: the `flwr run` command and its environment, the results folder, the launch's
    token, private FLWR_HOME and Ray folder (None: the user's)."""

    flwr: str
    cmd: list[str]
    env: dict[str, str]
    folder: Path
    token: str
    flwr_home: Path
    ray_dir: Path | None


def run(
    overrides: dict,
    cpus_per_client: float = 1.0,
    gpus_per_client: float | None = None,
    quiet: bool = False,
    check_data: bool = True,
    supernodes: int | None = None,
) -> Path:
    """Validate, run through `flwr run`, check the outcome; returns the results folder.

    Raises ConfigError (and the dataset errors) before anything starts, RunFailed when the run failed or
    diverged, Interrupted on SIGINT/SIGTERM/SIGHUP (after stopping every process of the launch)."""
    cfg, overrides = checked_config(overrides, quiet)
    for problem in tracking_errors(cfg):  # also when the data checks are skipped
        raise ConfigError(problem)
    if cfg["client-state"] == "device":  # the ClientApps of `flwr run` are other processes
        raise ConfigError(DEVICE_NEEDS_ONE_PROCESS)
    flwr = flwr_executable()
    if check_data:
        preflight(cfg, quiet)
    else:
        check_writable(absolute(str(cfg["out-dir"])), "out-dir")
    folder, token = claimed_folder(cfg, overrides)
    federation = federation_config(cfg, cpus_per_client, gpus_per_client, supernodes)
    flwr_home = Path(tempfile.mkdtemp(prefix="fedsuite-flwr-home-"))
    ray_dir = private_ray_dir()
    env = flower_env(token, flwr_home, ray_dir)
    cmd = [flwr, "run", str(PROJECT), "--stream", "--federation-config", federation,
           "-c", " ".join(f"{k}={toml_value(v)}" for k, v in flower_overrides(overrides).items())]  # fmt: skip
    if not quiet:
        print("$ " + shlex.join(cmd), flush=True)
    return watched(Started(flwr, cmd, env, folder, token, flwr_home, ray_dir), quiet)


def checked_config(overrides: dict, quiet: bool = False) -> tuple[Config, dict]:
    """The config a launch runs with (a resumed run's config under the given keys, the preset expanded, the -c keys
    winning also where they equal a default), printed unless `quiet`, and a resume checked; with the overrides
    after the preset's expansion. Raises ConfigError before anything starts."""
    explicit = resumed_overrides(dict(overrides))
    overrides, from_preset = expand_preset(explicit)
    cfg = resolve({**pyproject_defaults(), **overrides})
    if not quiet:
        print(describe_config(cfg, from_preset, explicit), flush=True)
    check_resume(cfg)
    return cfg, overrides


def claimed_folder(cfg: Config, overrides: dict) -> tuple[Path, str]:
    """The run's results folder, claimed for a fresh token (never another run's, unless overwrite=true); sets
    out-dir and run-name in `overrides` to what the run writes into."""
    overrides["out-dir"] = str(absolute(str(cfg["out-dir"])))
    overrides["run-name"] = str(cfg["run-name"]) or default_run_name(str(cfg["algorithm"]), str(cfg["dataset"]))
    folder = Path(overrides["out-dir"]) / overrides["run-name"]
    token = new_token()
    try:
        claim_folder(folder, bool(cfg["overwrite"]), token, resume=bool(cfg["resume-from"]))
    except ResultsFolderTaken as err:
        raise ConfigError(f"run-name={overrides['run-name']!r}: {err}") from None
    except OSError as err:
        what = "is full" if is_disk_full(err) else "is not writable"
        raise ConfigError(f"out-dir={overrides['out-dir']!r} {what}: cannot claim {folder} ({err.strerror or err}); "
                          "free space there or choose another out-dir") from None  # fmt: skip
    return folder, token


def federation_config(cfg: Config, cpus_per_client: float, gpus_per_client: float | None,
                      supernodes: int | None) -> str:  # fmt: skip
    """`flwr run --federation-config`: the SuperNodes and each client's CPU and GPU share (0.25 GPU with CUDA)."""
    if gpus_per_client is None:
        gpus_per_client = 0.25 if cuda_visible() and cfg["device"] != "cpu" else 0.0
    if supernodes is None:
        supernodes = federation_size(cfg, cpus_per_client, gpus_per_client)
    federation = f"num-supernodes={supernodes} client-resources-num-cpus={cpus_per_client:g}"
    if gpus_per_client:
        federation += f" client-resources-num-gpus={gpus_per_client:g}"
    return federation


def start_reaper(started: Started) -> subprocess.Popen:
    """simulation.launcher.reaper, in a session of its own, holding the other end of its standard input."""
    return subprocess.Popen(
        [sys.executable, "-m", "simulation.launcher.reaper", started.token, str(started.folder),
         str(started.flwr_home), str(started.ray_dir or "")],
        stdin=subprocess.PIPE,
        cwd=PROJECT,
        env={k: v for k, v in os.environ.items() if k != RUN_TOKEN_ENV},
        start_new_session=True,
    )  # fmt: skip


def watched(started: Started, quiet: bool) -> Path:
    """Run the launch to its end with a reaper beside it; on a signal stop every process of the launch and mark
    the run interrupted; in any case let the reaper clean up, and put the signal handlers back."""
    reaper = start_reaper(started)
    previous = {sig: signal.signal(sig, raise_interrupted) for sig in SIGNAL_EXIT}
    log = LaunchLog(started.folder / "flwr.log")
    try:
        return ended(started, log, quiet)
    except Interrupted as err:
        for sig in SIGNAL_EXIT:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        leave_stop_note(started.flwr_home, started.token, str(err), err.at)  # before any process is signalled
        Launch(started.token, started.ray_dir, spare={reaper.pid}).stop()
        mark_stopped(started.folder, "interrupted", str(err), stopped_at=err.at)
        err.folder = started.folder
        raise
    finally:
        for sig in SIGNAL_EXIT:
            signal.signal(sig, signal.SIG_IGN)
        reaper.stdin.close()  # the reaper stops what is left (the SuperLink) and removes the FLWR_HOME
        try:
            reaper.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def ended(started: Started, log: LaunchLog, quiet: bool) -> Path:
    """Stream `flwr run` to its end and return the results folder, or raise RunFailed with how it ended."""
    folder = started.folder
    run_id = stream(started.cmd, started.env, log, quiet)
    if run_id is None:
        if log.full:
            raise RunFailed(log.full, "failed", folder)
        raise RunFailed(f"flwr run did not start a run; see {folder / 'flwr.log'}", "failed", folder)
    flower_status = run_status(started.flwr, run_id, started.env)
    return outcome(folder, run_id, flower_status, log.full)
