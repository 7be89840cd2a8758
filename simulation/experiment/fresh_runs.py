"""Studies start fresh runs: simulation.compare, sweep and tune refuse a `resume-from` among their settings.

Each study gives every run a results folder of its own and reuses the runs that finished when it is run again, so
a checkpoint of one run has no place in it (before, compare and sweep ended in a traceback and tune in trials that
all failed). The refusal is one line, before any run, naming the ways out.
"""

from __future__ import annotations

from collections.abc import Iterable

from fedsuite.config.run_config import ConfigError

KEY = "resume-from"


def refuse_resume(keys: Iterable[str], command: str, rerun: str) -> None:
    """ConfigError if `keys` (the study's -c keys, or its grid's) hold resume-from; `rerun` says how a rerun of
    `command` reuses what finished."""
    if KEY in set(keys):
        raise ConfigError(
            f"{KEY}: python -m {command} starts fresh runs and resumes none; to continue one run, resume it "
            f"with python -m simulation.run -c \"{KEY}='<its results folder>'\", or rerun this command{rerun}, "
            "which reuses the runs that finished"
        )
