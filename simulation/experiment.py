"""An experiment is a set of jobs (run configs: algorithm × seed × grid point × any other keys, each with its
results folder) and a report (simulation.report). This is the one runner every study command uses.

A job runs on one of two engines: `flwr` (a real `flwr run` simulation through simulation.run) or `inprocess` (the
ServerApp's strategy and the ClientApp's clients in this process, `fedsuite.inprocess.run_inprocess(record=True)`,
writing the same results folder). A job may instead carry its own in-process `work` (a study that observes the run
itself, e.g. the low-rank and DLG studies), whose return value is kept. The runner reuses jobs whose folder holds a
completed or diverged run with the same explicit settings (`reuse`), runs K jobs at once as child processes
(`parallel`), and gives every job an honest status: completed, failed or diverged, never a score of a run that did
not complete.

    python -m simulation.experiment --run-one '<overrides as JSON>' --engine inprocess   # one job (a child)
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsuite.config import Config, ConfigError, resolve
from fedsuite.tracking import close_all, group_environment, tracking_errors, tracking_observers
from simulation.presets import expand as expand_preset
from simulation.report import run_status
from simulation.run import PROJECT, Interrupted, RunFailed, parse_overrides, pyproject_defaults

ENGINES = ("flwr", "inprocess")
ENGINE_HELP = ("flwr: every run is a real `flwr run` simulation; inprocess: the same strategy and clients called in "
               "this process, one client at a time (no Ray, no SuperLink; fast for small models)")  # fmt: skip


@dataclass
class Job:
    """One run: `settings` are its explicit run-config keys (what a reused run must have run with), `folder` its
    results folder, `keys` what the report groups it by (algorithm, grid point, seed, M, T …)."""

    settings: dict
    folder: Path | None = None
    label: str = ""
    keys: dict = field(default_factory=dict)
    work: Callable[[], Any] | None = None  # run in this process instead of an engine; its value is kept
    group: str | None = None  # the experiment tracking group (a sweep's name): W&B group of the run

    def overrides(self) -> dict:
        """The run config to launch with: the settings, writing into `folder` (replacing an unfinished run)."""
        return {**self.settings, "out-dir": str(self.folder.parent), "run-name": self.folder.name, "overwrite": True}


@dataclass
class Outcome:
    job: Job
    status: str  # completed, failed, diverged (or interrupted)
    message: str = ""  # why it did not complete
    value: Any = None  # what the job's `work` returned
    reused: bool = False  # completed (or diverged) earlier with the same settings: not run again

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def parse_grid(text: str) -> list[tuple[tuple[str, object], ...]]:
    """`"lr=0.01,0.05 local-epochs=2,5"` → the cartesian product of (key, value) pairs (TOML values)."""
    axes = []
    for item in text.split():
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise ConfigError(f"--grid {item!r}: write key=value1,value2")
        axes.append([(key, parse_overrides([f"{key}={v}"])[key]) for v in values.split(",")])
    return [tuple(p) for p in itertools.product(*axes)] if axes else [()]


def grid_tag(point: tuple[tuple[str, object], ...]) -> str:
    """A grid point's folder name: `lr=0.05_local-epochs=2`, or `default` for the empty point. A list value's commas
    become '-' (`fedmim-alphas=0.3-0.1`): Flower's app bundle cannot hold a path with a comma, and a results folder
    may lie inside the project (docs/)."""
    return "_".join(f"{k}={v}".replace(",", "-") for k, v in point) or "default"


def resolved(settings: dict) -> Config:
    """The full config a job runs with (project defaults, the preset expanded, the explicit keys winning)."""
    return resolve({**pyproject_defaults(), **expand_preset(settings)[0]})


def validate(jobs: Sequence[Job]) -> list[Config]:
    """Every job's config, resolved before anything runs: a bad setting, or a tracking key whose package is
    missing, raises ConfigError naming it."""
    configs = [resolved(job.settings) for job in jobs]
    for cfg in configs:
        for problem in tracking_errors(cfg):
            raise ConfigError(problem)
    return configs


SETTLED = ("completed", "diverged")  # outcomes a rerun with the same seed and settings would repeat


def ended_as(folder: Path, explicit: dict) -> str | None:
    """How the run in `folder` ended, when a rerun would only repeat it: `completed` or `diverged` (the same seed
    and settings diverge the same way), and every setting given explicitly now is the one it ran with; None for a
    run that is missing, unfinished, failed (a crash is worth another try) or ran with other settings."""
    try:
        status = json.loads((folder / "summary.json").read_text())["status"]
        ran = json.loads((folder / "config.json").read_text())["run_config"]
    except (OSError, ValueError, KeyError):
        return None
    return status if status in SETTLED and all(ran.get(k) == v for k, v in explicit.items()) else None


def finished(folder: Path, explicit: dict) -> bool:
    """The run in `folder` completed, and every setting given explicitly now is the one it ran with."""
    return ended_as(folder, explicit) == "completed"


def reusable(job: Job) -> str | None:
    """`completed` or `diverged` for a job whose folder holds that outcome with the same explicit settings."""
    return None if job.folder is None else ended_as(job.folder, expand_preset(job.settings)[0])


def is_finished(job: Job) -> bool:
    """A job whose folder holds a completed run with the same explicit settings (preset keys included)."""
    return reusable(job) == "completed"


def run_in_process(overrides: dict, quiet: bool = True, group: str | None = None) -> Path:
    """One run of the ServerApp's strategy with the ClientApp's clients in this process (`fedsuite.inprocess`),
    recorded to the same results folder as a `flwr run`, tracked as the run config asks (TensorBoard, W&B; in
    tracking `group`); a run that does not complete raises RunFailed."""
    from fedsuite.inprocess import run_inprocess
    from fedsuite.server_app import results_folder

    overrides, _ = expand_preset(overrides)  # the explicit keys win over a preset (simulation.presets)
    cfg = {**pyproject_defaults(), **overrides}
    settings = resolve(cfg)
    folder = results_folder(settings)
    trackers = tracking_observers(settings, folder, group)
    logging.getLogger("flwr").setLevel(logging.WARNING if quiet else logging.INFO)
    try:
        run_inprocess(cfg, record=True, observers=trackers)
    except Exception as err:  # the recorder has written the status (RecordingServer, RunAborted)
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
    from simulation.run import run

    with group_environment(group):  # the ServerApp of the launch reads it (fedsuite.tracking.launch_group)
        return run(overrides, quiet=True, check_data=False)


def _run_here(job: Job, engine: str) -> Outcome:
    try:
        if job.work is not None:
            return Outcome(job, "completed", value=job.work())
        launch(job.overrides(), engine, job.group)
        return Outcome(job, "completed")
    except RunFailed as err:
        return Outcome(job, err.status, str(err))
    except (Interrupted, KeyboardInterrupt):
        raise
    except Exception as err:  # a job's own work failed: that job failed, the others still run
        if job.work is None:
            raise
        return Outcome(job, "failed", f"{type(err).__name__}: {err}")


def _run_children(jobs: list[Job], engine: str, parallel: int, on_done) -> list[Outcome]:
    """K jobs at once, each `python -m simulation.experiment --run-one …`; a job's status is its summary's."""
    outcomes: dict[int, Outcome] = {}
    pending, running = list(enumerate(jobs)), {}
    while pending or running:
        while pending and len(running) < parallel:
            index, job = pending.pop(0)
            command = [sys.executable, "-m", "simulation.experiment", "--run-one", json.dumps(job.overrides()),
                       "--engine", engine, *(["--group", job.group] if job.group else [])]  # fmt: skip
            print(f"── start {job.label} ──", flush=True)
            running[index] = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=PROJECT)
        for index, proc in list(running.items()):
            if proc.poll() is None:
                continue
            del running[index]
            job = jobs[index]
            status = run_status(job.folder) if proc.returncode in (0, 1, 3) else "failed"
            outcomes[index] = Outcome(job, status, "" if status == "completed" else f"exit code {proc.returncode}")
            print(f"── done {job.label}: {status} ──", flush=True)
            if on_done is not None:
                on_done(outcomes[index])
        time.sleep(0.5)
    return [outcomes[i] for i in range(len(jobs))]


def run_jobs(jobs: Sequence[Job], engine: str = "inprocess", parallel: int = 1, reuse: bool = False,
             on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:  # fmt: skip
    """Run every job (one at a time, or `parallel` at once as child processes); with `reuse`, a job whose folder
    holds a completed or diverged run with the same settings is not run again (a rerun would repeat it; a failed
    one is redone). A job that fails is recorded as such and the
    others still run; Interrupted (a signal) stops the experiment. `on_done(outcome)` is called after each job.
    Returns the outcomes in the order of `jobs`."""
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: must be one of {', '.join(ENGINES)}")
    outcomes: dict[int, Outcome] = {}
    todo = []
    for index, job in enumerate(jobs):
        earlier = reusable(job) if reuse else None
        if earlier is not None:
            print(f"── {job.label} ──\n   {earlier} earlier with the same settings: reused", flush=True)
            message = "" if earlier == "completed" else f"{earlier} earlier with the same settings"
            outcomes[index] = Outcome(job, earlier, message, reused=True)
            if on_done is not None:
                on_done(outcomes[index])
        else:
            todo.append(index)
    if parallel > 1 and all(jobs[i].work is None for i in todo):
        for index, outcome in zip(todo, _run_children([jobs[i] for i in todo], engine, parallel, on_done),
                                  strict=True):  # fmt: skip
            outcomes[index] = outcome
    else:
        for index in todo:
            print(f"── {jobs[index].label} ──", flush=True)
            outcomes[index] = _run_here(jobs[index], engine)
            if not outcomes[index].completed:
                print(f"   {outcomes[index].status}: {outcomes[index].message}", flush=True)
            if on_done is not None:
                on_done(outcomes[index])
    return [outcomes[i] for i in range(len(jobs))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.experiment", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-one", required=True, help="one run's overrides as JSON")
    parser.add_argument("--engine", choices=ENGINES, default="flwr")
    parser.add_argument("--group", default=None, help="experiment tracking group (a sweep's name)")
    args = parser.parse_args(argv)
    try:
        launch(json.loads(args.run_one), args.engine, args.group)
        return 0
    except RunFailed as err:
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
