"""Every run of a study keeps its client state in a folder of its own (docs/running/compare-and-sweep.md#client-state).

A `client-state-dir` given with -c (or --grid) would serve every run of the study, but a run never starts from
another run's client state (the folder's owner record, fedsuite/state/store.py): the second run into the folder was
refused, so a sweep failed every seed after the first and its rerun could only fail again. So each run gets the
subfolder named after its results folder below the study's --out, e.g. `<client-state-dir>/runs/<algorithm>/<grid
point>/seed-<s>` in a sweep. Before the first run every subfolder is checked: one holding the client state of a
run outside the study is refused (one line, exit code 2). One holding an earlier attempt of the same run (failed or
interrupted, run again into its results folder) is emptied of that attempt's files just before the run starts
again: the study replaces that run.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fedsuite.config.run_config import ConfigError
from simulation.experiment.jobs import Job

KEY = "client-state-dir"


def own_folder(settings: dict, folder: Path, base: Path) -> dict:
    """`settings` with a configured client-state-dir replaced by the run's own subfolder: the run's results folder
    `folder` relative to `base` (the study's --out), below it. An absolute path, as a --parallel child runs from
    the project folder."""
    configured = settings.get(KEY)
    if not configured:
        return settings
    return {**settings, KEY: str(Path(str(configured)).expanduser().resolve() / folder.relative_to(base))}


def folder_of(job: Job) -> Path | None:
    """The job's configured client-state folder (its own subfolder), None without one."""
    configured = job.settings.get(KEY)
    return Path(str(configured)) if configured and job.work is None else None


def _earlier_attempt(root: Path, job: Job) -> bool:
    """The folder's owner record names the job's own results folder: an earlier attempt of this run."""
    from fedsuite.state import folders  # imported when needed, as the other fedsuite modules here

    record = folders.owner(root)
    return record is not None and record.get("results") == str(job.folder)


def check_folders(jobs: Iterable[Job]) -> None:
    """Before the first run: ConfigError (the owner check's line) for a job whose client-state folder holds the
    client state of another run, or files of an unknown one."""
    from fedsuite.state import folders as state

    for job in jobs:
        root = folder_of(job)
        if root is None or _earlier_attempt(root, job):
            continue
        try:
            state.check_owner(root, None)
        except state.StateFolderTaken as err:
            raise ConfigError(f"run {job.label}: {err}") from None


def clear_earlier_attempt(job: Job) -> None:
    """Just before `job` runs (again): the files an earlier attempt of it left in its client-state folder (its
    partition and previous files and the owner record) go, so the new attempt can claim the folder; the folder of
    any other run is left as it is (the run then refuses it)."""
    from fedsuite.state import folders as state

    root = folder_of(job)
    if root is None or not _earlier_attempt(root, job):
        return
    for path in state.state_files(root):
        path.unlink(missing_ok=True)
    (root / state.OWNER).unlink(missing_ok=True)
