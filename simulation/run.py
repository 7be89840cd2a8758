"""Run one experiment through `flwr run` (Ray simulation), stop it when told, and say truthfully how it ended.

    python -m simulation.run -c "algorithm='fedprox' prox-mu=0.01 num-server-rounds=20"

What it adds to a bare `flwr run . --stream`:
- the run config is validated first, the results folder and any client-state folder are checked writable,
  and the dataset is decoded and partitioned once (preflight), so a bad key, a corrupt file, an unwritable
  folder or an infeasible partition stop in seconds with exit code 2, not after Ray's cold start;
- the results folder is claimed before anything starts: an existing run is never overwritten unless
  `overwrite=true`, and default names are unique per launch;
- the federation is sized for parallelism, not for N: as many SuperNodes as client workers fit the machine
  (CPU cores / --cpus-per-client, or GPU shares), each training whichever partitions the server names
  (client-mapping='logical'); with client-mapping='fixed' one SuperNode per client;
- every process of the launch (the local SuperLink, SuperExec, `flwr-simulation`, Ray) carries a token in its
  environment and gets a private FLWR_HOME and ports, so Ctrl-C or SIGTERM stops all of them within seconds,
  the end of the run stops the SuperLink, and a reaper process does the same if this command is killed;
- the exit code is the run's status from summary.json (`flwr run --stream` exits 0 on a failed run):
  0 completed, 1 failed, 3 diverged, 130/143 interrupted (SIGINT/SIGTERM), 2 bad input;
- Flower's output goes to the console and to `flwr.log` in the results folder (over-long lines are cut on the
  console only); Flower's telemetry, update check and runtime dependency installation are switched off.
Prints the results folder as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from fedsuite.config import Config, ConfigError, resolve
from fedsuite.results import (
    RUN_TOKEN_ENV,
    STATUSES,
    ResultsFolderTaken,
    append_atomic,
    claim_folder,
    default_run_name,
    full_message,
    is_disk_full,
    mark_stopped,
    read_closing_line,
)
from fedsuite.tracking import tracking_errors
from simulation.presets import describe as describe_config
from simulation.presets import expand as expand_preset
from simulation.processes import Launch, new_token

PROJECT = Path(__file__).resolve().parent.parent
QUIET_FLOWER = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",  # silences Ray's FutureWarning about it, on every worker
}
CLOSING_LINE = re.compile(r"fedsuite │ run (completed|failed|diverged|interrupted) │")
# Flower's lines that say nothing true about a run simulation.run sized itself (flwr.log keeps them): the notice
# about the default federation size and its resize hint, printed whatever the size, and the Ray actors' shutdown.
FLOWER_NOISE = (
    "default simulated SuperNodes changed from",
    "To change federation size, use the following command",
    "flwr federation simulation-config",
    "Manually terminating ClientAppActor",
    "Flower configuration not found. Created default configuration",  # the launch's own private FLWR_HOME
)
CONSOLE_LINE_CHARS = 400  # longer lines (e.g. a warning that prints a 100-number list) are cut on the console
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class RunFailed(RuntimeError):
    """The run ended but did not complete: `status` is failed or diverged, `folder` holds what it wrote."""

    def __init__(self, message: str, status: str = "failed", folder: Path | None = None):
        super().__init__(message)
        self.status, self.folder = status, folder

    @property
    def exit_code(self) -> int:
        return STATUSES.get(self.status, 1)


class Interrupted(RuntimeError):
    """A signal stopped the run; every process of the launch has been stopped."""

    def __init__(self, signum: int, folder: Path | None = None):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.folder = signum, folder
        self.at = time.time()  # a failure the run reports after this came of the stop (results.mark_stopped)

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT.get(self.signum, 128 + self.signum)


def pyproject_defaults(project: Path = PROJECT) -> dict:
    return tomllib.loads((project / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def parse_overrides(overrides: list[str]) -> dict:
    """`-c "key=value key2=value2"` (TOML values) → dict; a malformed string or a repeated key is a ConfigError."""
    import click
    from flwr.common.config import parse_config_args

    seen: dict[str, str] = {}
    for text in overrides:
        try:
            pairs = shlex.split(text) if not text.strip().endswith(".toml") else []
        except ValueError as err:  # an unbalanced quote
            raise ConfigError(f"-c {text!r}: {err}; strings go in quotes: -c \"algorithm='fedprox'\"") from None
        for pair in pairs:
            key = pair.split("=", 1)[0].strip()
            if "=" not in pair:
                raise ConfigError(f'-c: {pair!r} is not key=value; write e.g. -c "{pair}=<value>"')
            if key in seen:
                raise ConfigError(f"-c: key {key!r} is given twice ({seen[key]!r} and {pair!r}); give it once")
            seen[key] = pair
    try:
        return parse_config_args(overrides) if overrides else {}
    except click.ClickException as err:
        raise ConfigError(
            f"-c {' '.join(overrides)!r}: {err.format_message()}; write key=value pairs with TOML values, "
            "strings in quotes: -c \"algorithm='fedprox' lr=0.05\""
        ) from None


def check_writable(path: Path, key: str) -> None:
    """Create `path` if needed and write a file in it (root ignores file modes, so only trying tells)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".fedsuite-write-check-"):
            pass
    except OSError as err:
        raise ConfigError(f"{key}={str(path)!r}: not writable ({err.strerror or err}); choose another folder") from None


def preflight(cfg: Config, quiet: bool = False) -> None:
    """Check what can be checked before Flower starts: folders writable, dataset decodes, partition feasible, the
    model builds and fits the data; print the client-state estimate of stateful algorithms. Raises ConfigError /
    DatasetNotFound / ValueError (ModelError is one)."""
    from fedsuite import state
    from fedsuite.data import DatasetNotFound, client_partition, server_dataset, with_data_clients
    from fedsuite.data_checks import check_evaluation_data
    from fedsuite.server_app import check_model, client_plan

    check_writable(_absolute(str(cfg["out-dir"])), "out-dir")
    try:
        dataset = server_dataset(cfg)  # server-data=false: the shapes only, no file read
    except DatasetNotFound as err:
        if not cfg["preset"]:
            raise
        raise DatasetNotFound(f"preset={cfg['preset']!r}: {err}") from None
    cfg = with_data_clients(cfg)  # partition='natural': N comes from the data
    if cfg.data.on_server:
        client_partition(cfg, dataset)
        check_evaluation_data(cfg, dataset)
    check_model(cfg, dataset)
    plan = client_plan(cfg, dataset)  # the ServerApp's and the clients' plan
    folder = plan.disk_folder()  # every client writes there: algorithm state, or buffers='local' alone
    if folder is not None:
        check_writable(folder, "client-state-dir")
    if folder is not None and cfg["client-state-dir"]:  # a run never starts from another run's client state
        resumed = _load_checkpoint(_absolute(str(cfg["resume-from"]))) if cfg["resume-from"] else None
        try:
            state.check_owner(folder, resumed.state_key if resumed is not None else None)
        except state.StateFolderTaken as err:
            raise ConfigError(str(err)) from None
    if plan.holds:
        mode, n = plan.mode, plan.num_clients
        if not quiet:
            print(plan.describe(), flush=True)
        problem = plan.capacity()
        if problem and problem[0] == "error":
            raise ConfigError(f"client-state={mode!r} num-clients={n}: {problem[1]}")
        if problem:
            print(f"warning: client-state={mode!r} num-clients={n}: {problem[1]}", file=sys.stderr, flush=True)


def _absolute(path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (Path.cwd() / p).resolve()


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
    they hold open (simulation.processes) and their logs go with the launch; None where the user set RAY_TMPDIR
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
    explicit = resumed_overrides(dict(overrides))
    overrides, from_preset = expand_preset(explicit)  # the -c keys win over the preset, also where = default
    cfg = resolve({**pyproject_defaults(), **overrides})  # raises ConfigError before anything starts
    if not quiet:
        print(describe_config(cfg, from_preset, explicit), flush=True)
    check_resume(cfg)
    for problem in tracking_errors(cfg):  # also when the data checks are skipped
        raise ConfigError(problem)
    flwr = flwr_executable()
    if check_data:
        preflight(cfg, quiet)
    else:
        check_writable(_absolute(str(cfg["out-dir"])), "out-dir")
    overrides["out-dir"] = str(_absolute(str(cfg["out-dir"])))
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
    if gpus_per_client is None:
        gpus_per_client = 0.25 if _cuda_visible() and cfg["device"] != "cpu" else 0.0
    if supernodes is None:
        supernodes = federation_size(cfg, cpus_per_client, gpus_per_client)
    federation = f"num-supernodes={supernodes} client-resources-num-cpus={cpus_per_client:g}"
    if gpus_per_client:
        federation += f" client-resources-num-gpus={gpus_per_client:g}"
    flwr_home = Path(tempfile.mkdtemp(prefix="fedsuite-flwr-home-"))
    ray_dir = private_ray_dir()
    env = flower_env(token, flwr_home, ray_dir)
    cmd = [flwr, "run", str(PROJECT), "--stream", "--federation-config", federation,
           "-c", " ".join(f"{k}={_toml(v)}" for k, v in flower_overrides(overrides).items())]  # fmt: skip
    if not quiet:
        print("$ " + shlex.join(cmd), flush=True)
    reaper = subprocess.Popen(
        [sys.executable, "-m", "simulation.reaper", token, str(folder), str(flwr_home), str(ray_dir or "")],
        stdin=subprocess.PIPE,
        cwd=PROJECT,
        env={k: v for k, v in os.environ.items() if k != RUN_TOKEN_ENV},
        start_new_session=True,
    )
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in SIGNAL_EXIT}
    log = LaunchLog(folder / "flwr.log")
    try:
        run_id = _stream(cmd, env, log, quiet)
        if run_id is None:
            if log.full:
                raise RunFailed(log.full, "failed", folder)
            raise RunFailed(f"flwr run did not start a run; see {folder / 'flwr.log'}", "failed", folder)
        flower_status = run_status(flwr, run_id, env)
        return _outcome(folder, run_id, flower_status, log.full)
    except Interrupted as err:
        for sig in SIGNAL_EXIT:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        Launch(token, ray_dir, spare={reaper.pid}).stop()
        mark_stopped(folder, "interrupted", str(err), stopped_at=err.at)
        err.folder = folder
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


def check_resume(cfg: Config) -> None:
    """With resume-from, before anything starts: the checkpoint is whole (every file as sealed) and the run config
    computes what the checkpointed run did (fedsuite.checkpoint.check_compatible). Raises ConfigError naming the
    bad file, or every differing key with both values."""
    if not cfg["resume-from"]:
        return
    from fedsuite import checkpoint

    folder = _absolute(str(cfg["resume-from"]))
    ckpt = _load_checkpoint(folder)
    try:
        checkpoint.check_compatible(ckpt, dict(cfg))
    except checkpoint.CheckpointError as err:
        text = str(err)
        if "differs in" in text:
            text += ("; leave those keys out of -c to continue the run as it was, or start a new run (without "
                     "resume-from) to use the new values")  # fmt: skip
        raise ConfigError(f"resume-from={str(folder)!r}: {text}") from None


_CHECKPOINTS: dict[Path, object] = {}


def _load_checkpoint(folder: Path):
    """fedsuite.checkpoint.load (which verifies every file against the checkpoint's manifest first,
    fedsuite.checkpoint_files), once per process; every failure is a ConfigError naming the folder or file."""
    from fedsuite import checkpoint

    if folder not in _CHECKPOINTS:
        try:
            _CHECKPOINTS[folder] = checkpoint.load(folder)
        except Exception as err:  # a file load cannot read (BadZipFile, JSONDecodeError …)
            raise ConfigError(f"resume-from={str(folder)!r}: {_checkpoint_problem(err)}") from None
    return _CHECKPOINTS[folder]


def _checkpoint_problem(err: Exception) -> str:
    from fedsuite import checkpoint

    if isinstance(err, checkpoint.CheckpointError):
        return str(err)
    if isinstance(err, OSError) and err.filename:
        return f"checkpoint file {err.filename} cannot be read ({err.strerror or err}); resume from another copy"
    return f"the checkpoint cannot be read ({type(err).__name__}: {err}); resume from another copy"


def flower_overrides(overrides: dict) -> dict:
    """The overrides as Flower takes them: keys outside pyproject.toml's table (plug-in algorithms' keys) go into
    the one key `plugin-config`, which the apps unpack (fedsuite.config.unpack_plugin_config)."""
    from fedsuite.config import PLUGIN_CONFIG, parse_pairs

    table = pyproject_defaults()
    loose = {k: v for k, v in overrides.items() if k not in table}
    if not loose:
        return overrides
    packed = {**parse_pairs(str(overrides.get(PLUGIN_CONFIG, ""))), **loose}
    kept = {k: v for k, v in overrides.items() if k in table}
    return {**kept, PLUGIN_CONFIG: " ".join(f"{k}={_toml(v)}" for k, v in packed.items())}


def resumed_overrides(overrides: dict) -> dict:
    """With resume-from: the checkpointed run's config, the results folder it is in, then the given overrides
    (e.g. a larger num-server-rounds), so `-c "resume-from='<folder>'"` alone continues the run."""
    if not overrides.get("resume-from"):
        return overrides
    folder = _absolute(str(overrides["resume-from"]))
    base = _load_checkpoint(folder).run_config
    kept = {k: v for k, v in base.items() if k not in ("out-dir", "run-name", "overwrite", "resume-from")}
    return {**kept, **overrides, "resume-from": str(folder), "out-dir": str(folder.parent), "run-name": folder.name}


def print_resume_hint(folder: Path | None) -> None:
    """An interrupted or failed run with a checkpoint: say how to continue it."""
    from fedsuite import checkpoint

    if folder is not None and checkpoint.has_checkpoint(folder):
        print(f"resume it from its last checkpoint: {checkpoint.resume_command(folder)}", file=sys.stderr)


def federation_size(cfg: Config, cpus_per_client: float, gpus_per_client: float) -> int:
    """SuperNodes for the simulation: one per client with client-mapping='fixed'; else as many as client workers
    run at once (Ray's actors: CPU cores / CPU share, and GPUs / GPU share), at most N. The number of clients
    does not enter: a SuperNode trains whichever partitions the server names."""
    n = int(cfg["num-clients"])
    if cfg["client-mapping"] == "fixed":
        return n
    workers = max(1, int((os.cpu_count() or 1) / max(cpus_per_client, 1e-9)))
    if gpus_per_client:
        workers = min(workers, max(1, int(_gpu_count() / gpus_per_client)))
    return max(1, min(n, workers))


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


class LaunchLog:
    """flwr.log, appended one whole line at a time. A write that fails (a full out-dir) is cut off again and
    ends the log; `full` then holds the one-line message of a full out-dir."""

    def __init__(self, path: Path):
        self.path = path
        self.full: str | None = None
        self.failed = False

    def write(self, line: str) -> None:
        if self.failed:
            return
        try:
            append_atomic(self.path, line)
        except OSError as err:
            self.failed = True
            if is_disk_full(err):
                self.full = full_message(self.path.parent, self.path.name, err)
            else:
                print(f"warning: {self.path} cannot be written ({err.strerror or err}); the console keeps Flower's "
                      "output", file=sys.stderr, flush=True)  # fmt: skip


def _stream(cmd: list[str], env: dict[str, str], log: LaunchLog, quiet: bool) -> str | None:
    """Run `flwr run --stream`, copying its output to flwr.log and (filtered by ConsoleFilter) to the console;
    returns the run id."""
    run_id = None
    console = ConsoleFilter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=PROJECT,
                            start_new_session=True)  # fmt: skip
    try:
        for line in proc.stdout:
            log.write(line)
            if not quiet:
                sys.stdout.write(console(line))
                sys.stdout.flush()
            found = re.search(r"Successfully started run (\d+)", line)
            run_id = run_id or (found.group(1) if found else None)
        if not quiet:
            sys.stdout.write(console.flush())
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    return run_id


class ConsoleFilter:
    """What of Flower's stream the console shows (flwr.log keeps everything): over-long lines are cut, and the
    traceback of a run that fedsuite itself stopped (RunAborted: its reason was logged in one line already) is
    left out."""

    def __init__(self):
        self.block: list[str] | None = None

    def __call__(self, line: str) -> str:
        if self.block is None:
            if line.startswith("Traceback (most recent call last):"):
                self.block = [line]
                return ""
            if "fedsuite │ failed: " in line and _full_disk(line):  # said once, at the end, by simulation.run
                return ""
            if CLOSING_LINE.search(line) or any(noise in line for noise in FLOWER_NOISE):
                return ""  # the ServerApp's closing line (simulation.run ends with its own), Flower's noise
            return _cut(line)
        if line[:1].isspace() or not line.strip():
            self.block.append(line)
            return ""
        block, self.block = self.block + [line], None
        if "RunAborted: " in line:
            return "(the ServerApp stopped the run: reason above; traceback in flwr.log)\n"
        if _full_disk(line):  # the one line that says so comes at the end
            return ""
        return "".join(_cut(text) for text in block)

    def flush(self) -> str:
        block, self.block = self.block or [], None
        return "".join(_cut(text) for text in block)


def _full_disk(line: str) -> bool:
    return "OutDirFull: " in line or "[Errno 28]" in line


def _cut(line: str) -> str:
    if len(line) <= CONSOLE_LINE_CHARS:
        return line
    return line[:CONSOLE_LINE_CHARS] + " … (cut here; the whole line is in flwr.log)\n"


def _outcome(folder: Path, run_id: str, flower_status: str, full: str | None = None) -> Path:
    """The run's status: summary.json's, which Flower's must not contradict. `full`: the message of an out-dir
    that filled up under flwr.log (the ServerApp may not have been able to say so)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    status, reason = summary.get("status"), summary.get("reason")
    if status == "completed" and flower_status == "finished:completed":
        if full:
            print(f"warning: {full} (flwr.log is incomplete; the results are whole)", file=sys.stderr)
        return folder
    if status in ("failed", "diverged"):
        raise RunFailed(f"run {run_id} {status}: {reason}", status, folder)
    if full:
        written = mark_stopped(folder, "failed", full)
        where = "" if written else " (summary.json could not be updated: it still says running)"
        raise RunFailed(f"run {run_id} failed: {full}{where}", "failed", folder)
    reason = f"Flower reports {flower_status}; see the ServerApp's error in {folder / 'flwr.log'}"
    if not mark_stopped(folder, "failed", reason) and summary:
        reason = f"Flower reports {flower_status} but summary.json says {status}"
    raise RunFailed(f"run {run_id} failed: {reason}", "failed", folder)


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
    parser.add_argument(
        "--supernodes",
        type=int,
        default=None,
        help="simulated SuperNodes (default: as many as client workers run at once)",
    )
    parser.add_argument("--check", action="store_true", help="only validate the run config, folders, data, partition")
    parser.add_argument("--no-preflight", action="store_true", help="skip loading data/partition before the run")
    args = parser.parse_args(argv)
    try:
        overrides = parse_overrides(args.run_config)
        if args.check:
            explicit = resumed_overrides(overrides)
            expanded, from_preset = expand_preset(explicit)
            cfg = resolve({**pyproject_defaults(), **expanded})
            print(describe_config(cfg, from_preset, explicit), flush=True)
            check_resume(cfg)
            preflight(cfg)
            print("run config, folders, data and partition OK" + (", checkpoint whole" if cfg["resume-from"] else ""))
            return 0
        folder = run(
            overrides,
            args.cpus_per_client,
            args.gpus_per_client,
            check_data=not args.no_preflight,
            supernodes=args.supernodes,
        )
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        if err.folder is not None:
            print(f"results so far: {err.folder}", file=sys.stderr)
        print_resume_hint(err.folder)
        return err.exit_code
    except Interrupted as err:
        print(f"\ninterrupted ({err}); every process of the run was stopped", file=sys.stderr)
        if err.folder is not None:
            print(f"results so far: {err.folder}", file=sys.stderr)
        print_resume_hint(err.folder)
        return err.exit_code
    except KeyboardInterrupt:  # before the run started
        print("\ninterrupted before the run started", file=sys.stderr)
        return 130
    print(read_closing_line(folder))  # status, accuracy, rounds, lost replies, the results folder
    return 0


if __name__ == "__main__":
    sys.exit(main())
