"""The one runner every study uses: a list of jobs run one at a time in this process or K at once as child
processes, on either engine (simulation.experiment.engines), with reuse of what a rerun would repeat, progress
shown meanwhile (simulation.experiment.progress), and an honest status for every job: completed, failed or
diverged, never a score of a run that did not complete. A job may carry its own in-process `work` (a study that
observes the run itself, e.g. the low-rank and DLG studies), whose return value is kept. SIGINT, SIGTERM and SIGHUP
stop it alike: the runs in flight are stopped and waited for, marked `interrupted`, and Interrupted is raised for
the command to print how to continue (docs/running/compare-and-sweep.md).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fedsuite.config.run_config import ConfigError
from fedsuite.results.folder import FINISHED
from fedsuite.server.pruning import PRUNED
from simulation.experiment import engines
from simulation.experiment.client_state import clear_earlier_attempt
from simulation.experiment.jobs import Job, Outcome, damaged_earlier, planned_rounds, reusable
from simulation.experiment.progress import StudyProgress
from simulation.experiment.report import read_summary, run_status
from simulation.experiment.signals import (
    as_interrupted,
    ignore_signals,
    mark_interrupted,
    raise_deferred,
    stop_children,
    stop_on_signals,
)
from simulation.experiment.watcher import Watcher
from simulation.launcher.outcome import Interrupted, RunFailed
from simulation.launcher.project import PROJECT


def _run_here(job: Job, engine: str) -> Outcome:
    try:
        if job.work is not None:
            return Outcome(job, "completed", value=job.work())
        engines.launch(job.overrides(), engine, job.group)
        status = run_status(job.folder)  # a run that ended normally: completed, or budget-spent (its target ε)
        return Outcome(job, status, _said(job, status, f"the run returned, but its summary says {status}"))
    except RunFailed as err:
        return Outcome(job, err.status, str(err))
    except (Interrupted, KeyboardInterrupt) as err:
        ignore_signals()
        if job.work is None:
            mark_interrupted(job.folder, str(as_interrupted(err)))
        raise
    except Exception as err:  # a job's own work failed: that job failed, the others still run
        if job.work is None:
            raise
        return Outcome(job, "failed", f"{type(err).__name__}: {err}")


def _said(job: Job, status: str, otherwise: str) -> str:
    """What an outcome says: nothing for a finished run, a pruned run's reason (it stopped as its run config asked:
    where and why), else `otherwise`."""
    if status in FINISHED:
        return ""
    if status == PRUNED:
        return str(read_summary(job.folder).get("reason", ""))
    return otherwise


def mark_killed(folder: Path | None, returncode: int) -> None:
    """A child process ended by a signal it could not handle (SIGKILL, the out-of-memory killer) left its run
    `running`: the run failed, and what its cut-short writes left and its per-run client-state folder go."""
    from simulation.launcher.reaper import settle_stopped

    if folder is None or returncode >= 0:
        return
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    for problem in settle_stopped(folder, "failed", f"the run's process was killed by {name}"):
        print(f"fedsuite: {folder}: {problem}", file=sys.stderr)


def child_command(job: Job, engine: str) -> list[str]:
    """`python -m simulation.experiment.child …`: the job as a child process (simulation.experiment.child)."""
    return [sys.executable, "-m", "simulation.experiment.child", "--run-one", json.dumps(job.overrides()),
            "--engine", engine, *(["--group", job.group] if job.group else [])]  # fmt: skip


def _run_children(jobs: Sequence[Job], todo: list[int], engine: str, parallel: int, progress: StudyProgress,
                  done: Callable[[int, Outcome], None]) -> None:  # fmt: skip
    """K jobs at once, each `python -m simulation.experiment.child --run-one …`; a job's status is its summary's. On a
    signal the running children are stopped and waited for (stop_children) before it propagates."""
    pending, running = list(todo), {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                index = pending.pop(0)
                print(f"── start {jobs[index].label} ──", flush=True)
                clear_earlier_attempt(jobs[index])
                running[index] = subprocess.Popen(child_command(jobs[index], engine), stdout=subprocess.DEVNULL,
                                                  cwd=PROJECT)  # fmt: skip
                progress.started(index, jobs[index].label, jobs[index].folder)
            for index, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[index]
                job = jobs[index]
                mark_killed(job.folder, proc.returncode)
                status = run_status(job.folder) if proc.returncode in (0, 1, 3) else "failed"
                print(f"── done {job.label}: {status} ──", flush=True)
                done(index, Outcome(job, status, _said(job, status, f"exit code {proc.returncode}")))
            time.sleep(0.5)
    except (Interrupted, KeyboardInterrupt) as err:
        ignore_signals()
        stop_children({jobs[i].folder: proc for i, proc in running.items()}, as_interrupted(err).signum)
        raise


def run_jobs(jobs: Sequence[Job], engine: str = "inprocess", parallel: int = 1, reuse: bool = False,
             on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:  # fmt: skip
    """Run every job (one at a time, or `parallel` at once as child processes); with `reuse`, a job whose folder
    holds a completed or diverged run with the same settings is not run again (a rerun would repeat it; a failed
    one is redone, and so is one whose files are damaged). A job that fails is recorded as such and the others
    still run. SIGINT, SIGTERM or SIGHUP stops the experiment: the runs in flight (children included) are stopped
    and waited for, their summaries say `interrupted`, and Interrupted is raised (its exit_code 130/143/129).
    Progress (runs done, each running run's round, time left) is shown meanwhile (simulation.experiment.progress).
    `on_done(outcome)` is called after each job. Returns the outcomes in the order of `jobs`."""
    if engine not in engines.ENGINES:
        raise ConfigError(f"engine {engine!r}: must be one of {', '.join(engines.ENGINES)}")
    outcomes: dict[int, Outcome] = {}
    todo = _to_run(jobs, reuse, outcomes, on_done)
    progress = StudyProgress(len(todo), {i: planned_rounds(jobs[i]) for i in todo}, reused=len(jobs) - len(todo))

    def done(index: int, outcome: Outcome) -> None:
        outcomes[index] = outcome
        progress.finished(index, outcome.status)
        if on_done is not None:
            on_done(outcome)

    with stop_on_signals(), progress:
        try:
            if parallel > 1 and all(jobs[i].work is None for i in todo):
                _run_children(jobs, todo, engine, parallel, progress, done)
            else:
                _run_in_turn(jobs, todo, engine, progress, done)
        except (Interrupted, KeyboardInterrupt) as err:
            ignore_signals()
            raise as_interrupted(err) from None
    return [outcomes[i] for i in range(len(jobs))]


def _to_run(jobs: Sequence[Job], reuse: bool, outcomes: dict[int, Outcome],
            on_done: Callable[[Outcome], None] | None) -> list[int]:  # fmt: skip
    """The indices of the jobs to run; with `reuse`, the others' outcomes go into `outcomes` (each said, and passed
    to `on_done`), and a job run again because its earlier files are damaged is said so."""
    todo = []
    for index, job in enumerate(jobs):
        earlier = reusable(job) if reuse else None
        if earlier is not None:
            print(f"── {job.label} ──\n   {earlier} earlier with the same settings: reused", flush=True)
            message = "" if earlier == "completed" else f"{earlier} earlier with the same settings"
            outcomes[index] = Outcome(job, earlier, message, reused=True)
            if on_done is not None:
                on_done(outcomes[index])
            continue
        if reuse and (why := damaged_earlier(job)):
            print(f"── {job.label} ──\n   damaged: {why}", flush=True)
        todo.append(index)
    return todo


def _run_in_turn(jobs: Sequence[Job], todo: list[int], engine: str, progress: StudyProgress,
                 done: Callable[[int, Outcome], None]) -> None:  # fmt: skip
    """The jobs one after the other in this process; an in-process run is watched (simulation.experiment.watcher),
    and a signal that waited for a run to finish its writes stops the study once the run's outcome is in."""
    for index in todo:
        job = jobs[index]
        print(f"── {job.label} ──", flush=True)
        progress.started(index, job.label, job.folder)
        clear_earlier_attempt(job)
        watched = engine == "inprocess" and job.work is None
        Watcher.tell(job.folder if watched else None)
        try:
            outcome = _run_here(job, engine)
        finally:
            Watcher.tell(None)
        if not outcome.completed:
            print(f"   {outcome.status}: {outcome.message}", flush=True)
        done(index, outcome)
        raise_deferred()
