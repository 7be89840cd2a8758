"""Experiment tracking: round observers that mirror every results row into TensorBoard and Weights & Biases.

Switched on by the run-config keys `tensorboard` (event files in <results folder>/tensorboard: one scalar per numeric
column of the row, step = round, and the run config as the run's hyper-parameters) and `wandb-mode` ('offline': a
run folder under <results folder>/wandb for a later `wandb sync`; 'online': live). Both packages are optional
(`pip install 'fedsuite[tracking]'`); `tracking_errors` names a missing one before anything trains.

A tracker opens its writer at the first row it sees, so nothing is written into a results folder before the run
has claimed it; a fresh run (first row = round 0) removes what an earlier run replaced by `overwrite` left there,
a resumed run keeps it (TensorBoard drops the earlier events from the resumed round on). A tracker flushes after
every row and closes with the run's status when the round loop calls `ended` (fedsuite.server.loop), else at
interpreter exit (a Flower server loop of a user's own app).
A tracker that fails to write logs one warning and stops; the run goes on.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedsuite.config.run_config import Config
from fedsuite.results.folder import STATUSES
from fedsuite.server.observers import RoundObserver

log = logging.getLogger("flwr.fedsuite")

EXTRA_HINT = "pip install 'fedsuite[tracking]'"
TENSORBOARD_FOLDER = "tensorboard"
WANDB_FOLDER = "wandb"
GROUP_ENV = "FEDSUITE_TRACKING_GROUP"  # set by an experiment (a sweep) for the ServerApp of each of its runs
# (module imported, distribution to install) per tracker
_NEEDS = {"tensorboard": ("torch.utils.tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


def tracking_errors(cfg: Config) -> list[str]:
    """One line per tracking key that is on while its package cannot be imported (for the preflight)."""
    wanted = []
    if cfg.output.tensorboard:
        wanted.append(("tensorboard=true", "tensorboard"))
    if cfg.output.wandb_mode != "off":
        wanted.append((f"wandb-mode={cfg.output.wandb_mode!r}", "wandb"))
    problems = []
    for setting, tracker in wanted:
        module, package = _NEEDS[tracker]
        try:
            importlib.import_module(module)
        except ImportError as err:
            problems.append(f"{setting} needs the {package} package, which cannot be imported ({err}): {EXTRA_HINT}")
    return problems


def tracking_observers(cfg: Config, folder: Path, group: str | None = None) -> list[RoundObserver]:
    """The trackers the run config asks for, writing under the results folder `folder`; [] when both are off.
    `group` (a sweep's name) becomes the W&B group."""
    config = dict(cfg)
    trackers: list[RoundObserver] = []
    if cfg.output.tensorboard:
        trackers.append(TensorBoardTracker(Path(folder), config, cfg.run_control.num_rounds))
    if cfg.output.wandb_mode != "off":
        trackers.append(WandbTracker(Path(folder), config, cfg.run_control.num_rounds, cfg.output.wandb_mode,
                                     cfg.output.wandb_project, group))  # fmt: skip
    return trackers


def launch_group() -> str | None:
    """The group an experiment launched this run in (GROUP_ENV), or None."""
    return os.environ.get(GROUP_ENV) or None


@contextmanager
def group_environment(group: str | None):
    """GROUP_ENV set to `group` for the processes started inside (a `flwr run` and its ServerApp), then restored."""
    before = os.environ.get(GROUP_ENV)
    if group:
        os.environ[GROUP_ENV] = group
    else:
        os.environ.pop(GROUP_ENV, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(GROUP_ENV, None)
        else:
            os.environ[GROUP_ENV] = before


def close_all(observers, status: str | None = None) -> None:
    """Close every tracker among `observers` (the end of a run, however it ended)."""
    for observer in observers:
        if isinstance(observer, Tracker):
            observer.close(status)


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's numeric columns (round is the step; None, text and flags are left out)."""
    return {
        k: float(v) for k, v in row.items() if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class Tracker(RoundObserver):
    """Opens at the first row, writes every row, closes after the last round (or at exit, or when told)."""

    name = "tracker"

    def __init__(self, folder: Path, config: dict[str, Any], num_rounds: int):
        self.folder = folder
        self.config = config
        self.num_rounds = num_rounds
        self.opened = False
        self.closed = False

    def recorded(self, row: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            if not self.opened:
                self._open(int(row["round"]))
                self.opened = True
                atexit.register(self.close)
            self._write(int(row["round"]), scalars(row))
        except Exception as err:  # tracking is a side channel: the run and its results folder go on without it
            log.warning("fedsuite │ %s tracking stopped: %s: %s", self.name, type(err).__name__, err)
            self.close("failed")

    def ended(self, status: str, reason: str | None = None) -> None:
        """The run's final status, from the round loop (a run that diverges in its last round is not completed)."""
        self.close(status)

    def close(self, status: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        if self.opened:
            atexit.unregister(self.close)
            self._close(status)

    def _open(self, first_round: int) -> None:
        raise NotImplementedError

    def _write(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def _close(self, status: str | None) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    """Event files in <folder>/tensorboard: per-round scalars and the run config as hparams."""

    name = "TensorBoard"

    def _open(self, first_round: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        logdir = self.folder / TENSORBOARD_FOLDER
        if first_round == 0:  # a fresh run owns the folder: no events of a run it replaced stay
            for old in logdir.glob("events.out.tfevents.*"):
                old.unlink()
        # a resumed run: TensorBoard discards the earlier files' events from the first new round on
        self.writer = SummaryWriter(log_dir=str(logdir), purge_step=first_round or None)
        self.writer.file_writer.add_summary(_hparams_summary("session_start_info", self.config))
        self.writer.flush()

    def _write(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def _close(self, status: str | None) -> None:
        if status is not None:
            self.writer.file_writer.add_summary(_hparams_summary("session_end_info", status))
        self.writer.close()


def _hparams_summary(kind: str, value):
    """A TensorBoard HParams plugin summary: the session's start (hyper-parameters = the run config: flags as
    booleans, numbers as numbers, the rest as text) or its end (the run's status)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    if kind == "session_start_info":
        info = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
        for key, v in value.items():
            if isinstance(v, bool):
                info.hparams[key].bool_value = v
            elif isinstance(v, (int, float)) and math.isfinite(v):
                info.hparams[key].number_value = v
            else:
                info.hparams[key].string_value = str(v)
        data, tag = plugin_data_pb2.HParamsPluginData(session_start_info=info), metadata.SESSION_START_INFO_TAG
    else:
        status = api_pb2.STATUS_SUCCESS if value == "completed" else api_pb2.STATUS_FAILURE
        info = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
        data, tag = plugin_data_pb2.HParamsPluginData(session_end_info=info), metadata.SESSION_END_INFO_TAG
    smd = metadata.create_summary_metadata(data)
    return Summary(value=[Summary.Value(tag=tag, metadata=smd, tensor=metadata.NULL_TENSOR)])


def run_label(folder: Path) -> str:
    """A run's name in a tracker: its folder below the experiment's `runs/` folder (`fedcm/lr=0.05/seed-0`, unique
    within a sweep or a tuning), else the results folder's own name."""
    parts = folder.parts
    below = parts[len(parts) - parts[::-1].index("runs") :] if "runs" in parts else ()
    return "/".join(below) or folder.name


class WandbTracker(Tracker):
    """A W&B run named after the results folder (run_label), config = the run config, one history row per results row.
    Offline, its folder is <folder>/wandb/offline-run-*, uploaded later with `wandb sync`."""

    name = "W&B"

    def __init__(self, folder: Path, config: dict[str, Any], num_rounds: int, mode: str, project: str,
                 group: str | None = None):  # fmt: skip
        super().__init__(folder, config, num_rounds)
        self.mode, self.project, self.group = mode, project, group

    def _open(self, first_round: int) -> None:
        import wandb

        root = self.folder / WANDB_FOLDER
        if first_round == 0:  # a fresh run owns the folder: no W&B run of a run it replaced stays to be synced
            shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            mode=self.mode,
            project=self.project,
            dir=str(self.folder),
            name=run_label(self.folder),
            group=self.group,
            config=self.config,
            reinit="create_new",  # one process may hold several runs (an in-process sweep)
            settings=wandb.Settings(console="off", silent=True, save_code=False, disable_git=True),
        )
        run_folder = Path(self.run.dir).parent
        if self.mode == "offline":
            log.info("fedsuite │ W&B offline run → %s (upload it with: wandb sync %s)", run_folder, run_folder)
        else:
            log.info("fedsuite │ W&B run → %s", self.run.url)

    def _write(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def _close(self, status: str | None) -> None:
        self.run.finish(exit_code=None if status is None else 0 if STATUSES.get(status) == 0 else 1)
