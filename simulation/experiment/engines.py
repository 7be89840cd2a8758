"""The two engines a job runs on: `flwr` (a real `flwr run` simulation through simulation.launcher) and
`inprocess` (the ServerApp's strategy and the ClientApp's clients in this process, the same results folder)."""

from __future__ import annotations

import logging
from pathlib import Path

from fedsuite.config.presets import expand as expand_preset
from fedsuite.config.run_config import resolve
from fedsuite.results.tracking import close_all, group_environment, tracking_observers
from fedsuite.server.observers import RoundObserver
from simulation.experiment.report import run_status
from simulation.experiment.signals import deferring, run_finishing
from simulation.launcher.outcome import RunFailed
from simulation.launcher.project import pyproject_defaults

ENGINES = ("flwr", "inprocess")
ENGINE_HELP = ("flwr: every run is a real `flwr run` simulation; inprocess: the same strategy and clients called in "
               "this process, one client at a time (no Ray, no SuperLink; fast for small models)")  # fmt: skip


class LastRound(RoundObserver):
    """Says when the run records its last round's row: from then on it writes its end (summary, plot), which a
    study's signal lets finish (simulation.experiment.signals.deferring)."""

    def __init__(self, num_rounds: int):
        self.num_rounds = num_rounds

    def recorded(self, row: dict) -> None:
        if row.get("round", 0) >= self.num_rounds:
            run_finishing()


def run_in_process(overrides: dict, quiet: bool = True, group: str | None = None) -> Path:
    """One run of the ServerApp's strategy with the ClientApp's clients in this process (`fedsuite.run.inprocess`),
    recorded to the same results folder as a `flwr run`, tracked as the run config asks (TensorBoard, W&B; in
    tracking `group`); a run that does not complete raises RunFailed. A study's signal that arrives once the last
    round is recorded waits until the run has written its end (simulation.experiment.signals.raise_deferred)."""
    from fedsuite.run.inprocess import run_inprocess
    from fedsuite.server.app import results_folder

    overrides, _ = expand_preset(overrides)  # the explicit keys win over a preset (fedsuite.config.presets)
    cfg = {**pyproject_defaults(), **overrides}
    settings = resolve(cfg)
    folder = results_folder(settings)
    trackers = tracking_observers(settings, folder, group)
    logging.getLogger("flwr").setLevel(logging.WARNING if quiet else logging.INFO)
    try:
        with deferring():
            run_inprocess(cfg, record=True, observers=[*trackers, LastRound(settings.run_control.num_rounds)])
    except Exception as err:  # the recorder has written the status (RoundLoop, RunAborted)
        status = run_status(folder)
        status = status if status != "running" else "failed"
        close_all(trackers, status)
        raise RunFailed(f"{type(err).__name__}: {err}", status, folder) from err
    finally:
        close_all(trackers)  # a no-op for trackers already closed (after the last round, or just above)
    return folder


def launch(overrides: dict, engine: str, group: str | None = None) -> Path:
    """One run on `engine` (tracked in `group`); returns its results folder (RunFailed if it did not complete)."""
    if engine == "inprocess":
        return run_in_process(overrides, group=group)
    from simulation.launcher.launch import run

    with group_environment(group):  # the ServerApp of the launch reads it (fedsuite.results.tracking.launch_group)
        return run(overrides, quiet=True, check_data=False)
