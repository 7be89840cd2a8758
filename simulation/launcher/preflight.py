"""What can be checked before Flower starts: folders writable, dataset decodes, partition feasible, the model
builds and fits the data, client state fits (`python -m simulation.run --check` does only this)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from fedsuite.config.run_config import Config, ConfigError
from simulation.launcher.project import absolute
from simulation.launcher.resume import load_checkpoint


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
    from fedsuite.data import DatasetNotFound, client_partition, server_dataset, with_data_clients
    from fedsuite.evaluation.data_checks import check_evaluation_data
    from fedsuite.server.app import check_model, client_plan
    from fedsuite.state import folders as state

    check_writable(absolute(str(cfg["out-dir"])), "out-dir")
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
        resumed = load_checkpoint(absolute(str(cfg["resume-from"]))) if cfg["resume-from"] else None
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
