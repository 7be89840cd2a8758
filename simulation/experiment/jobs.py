"""Jobs: one run each (its explicit settings, results folder, report keys, or its own in-process work), checked
before anything runs, and reused when their folder already holds what a rerun would repeat."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsuite.config.presets import describe as describe_config
from fedsuite.config.presets import expand as expand_preset
from fedsuite.config.run_config import Config, ConfigError, resolve
from fedsuite.results.folder import FINISHED
from fedsuite.results.tracking import tracking_errors
from fedsuite.server.pruning import PRUNED
from simulation.experiment.report import damage, run_status
from simulation.launcher.project import pyproject_defaults


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
    status: str  # completed, budget-spent, failed, diverged (or interrupted)
    message: str = ""  # why it did not complete
    value: Any = None  # what the job's `work` returned
    reused: bool = False  # completed (or diverged) earlier with the same settings: not run again

    @property
    def completed(self) -> bool:
        """Ended as its config asked: every round, or as many as its privacy budget allowed."""
        return self.status in FINISHED


def resolved(settings: dict) -> Config:
    """The full config a job runs with (project defaults, the preset expanded, the explicit keys winning)."""
    return resolve({**pyproject_defaults(), **expand_preset(settings)[0]})


def described(cfg: Config, settings: dict) -> str:
    """The config `settings` resolve to, as simulation.run prints it (the preset's keys and the explicit ones
    marked)."""
    return describe_config(cfg, expand_preset(settings)[1], settings)


def validate(jobs: Sequence[Job]) -> list[Config]:
    """Every job's config, resolved before anything runs: a bad setting, or a tracking key whose package is
    missing, raises ConfigError naming it."""
    configs = [resolved(job.settings) for job in jobs]
    for cfg in configs:
        for problem in tracking_errors(cfg):
            raise ConfigError(problem)
    return configs


SETTLED = (*FINISHED, "diverged", PRUNED)  # outcomes a rerun with the same seed and settings would repeat


def ended_as(folder: Path, explicit: dict) -> str | None:
    """How the run in `folder` ended, when a rerun would only repeat it: `completed`, `diverged` (the same seed
    and settings diverge the same way) or `pruned` (by the same prune-at marks), and every setting given explicitly
    now is the one it ran with; None for a
    run that is missing, unfinished, failed (a crash is worth another try) or ran with other settings."""
    try:
        status = json.loads((folder / "summary.json").read_text())["status"]
        ran = json.loads((folder / "config.json").read_text())["run_config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if status not in SETTLED or not all(ran.get(k) == v for k, v in explicit.items()):
        return None
    if status == PRUNED and ran.get("prune-at") != explicit.get("prune-at"):  # stopped by marks this job lacks
        return None
    return None if damage(folder) else status  # a damaged run (a line of rounds.jsonl cut short) runs again


def finished(folder: Path, explicit: dict) -> bool:
    """The run in `folder` completed, and every setting given explicitly now is the one it ran with."""
    return ended_as(folder, explicit) in FINISHED


def reusable(job: Job) -> str | None:
    """`completed` or `diverged` for a job whose folder holds that outcome with the same explicit settings."""
    return None if job.folder is None else ended_as(job.folder, expand_preset(job.settings)[0])


def is_finished(job: Job) -> bool:
    """A job whose folder holds a completed run with the same explicit settings (preset keys included)."""
    return reusable(job) in FINISHED


def planned_rounds(job: Job) -> int | None:
    """The job's num-server-rounds (for the progress estimate); None for a job with its own work."""
    if job.work is not None:
        return None
    try:
        return int(resolved(job.settings)["num-server-rounds"])
    except (ConfigError, KeyError, TypeError, ValueError):
        return None


def damaged_earlier(job: Job) -> str | None:
    """Why a job whose folder holds a completed or diverged run is run again although its settings match: the
    run's files are damaged (report.damage)."""
    if job.folder is None or run_status(job.folder) not in SETTLED:
        return None
    return damage(job.folder)
