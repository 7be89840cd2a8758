"""An experiment is a set of jobs (run configs: algorithm × seed × grid point × any other keys, each with its
results folder) and a report (simulation.report). This is the one runner every study command uses.

A job runs on one of two engines: `flwr` (a real `flwr run` simulation through simulation.run) or `inprocess` (the
ServerApp's strategy and the ClientApp's clients in this process, `fedsuite.inprocess.run_inprocess(record=True)`,
writing the same results folder). A job may instead carry its own in-process `work` (a study that observes the run
itself, e.g. the low-rank and DLG studies), whose return value is kept. The runner reuses jobs whose folder holds a
completed or diverged run with the same explicit settings and whole files (`reuse`; a damaged one runs again), runs
K jobs at once as child processes (`parallel`), shows progress (simulation.progress), and gives every job an honest
status: completed, failed or diverged, never a score of a run that did not complete. SIGINT, SIGTERM and SIGHUP
stop it alike: the runs in flight (child processes included) are stopped and waited for, marked `interrupted`, and
Interrupted is raised for the command to print how to continue (docs/running/compare-and-sweep.md).

    python -m simulation.experiment --run-one '<overrides as JSON>' --engine inprocess   # one job (a child)
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsuite.config import Config, ConfigError, resolve
from fedsuite.results import mark_stopped, remove_temporaries
from fedsuite.tracking import close_all, group_environment, tracking_errors, tracking_observers
from simulation.presets import expand as expand_preset
from simulation.progress import StudyProgress
from simulation.report import damage, run_status
from simulation.run import PROJECT, SIGNAL_EXIT, Interrupted, RunFailed, parse_overrides, pyproject_defaults

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


def parse_list(text: str, flag: str, kind: Callable[[str], Any] = str) -> list:
    """A comma-separated flag value (`--seeds 0,1,2`, `--algorithms fedavg,scaffold`) → its items, each once: an item
    given twice would run the same run twice into one folder (and count it twice), so it is a ConfigError naming
    the flag and the item."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        values = [kind(item) for item in items]
    except ValueError:
        what = "integers such as 0,1,2" if kind is int else f"{kind.__name__} values"
        raise ConfigError(f"{flag} {text!r}: expected comma-separated {what}") from None
    if not values:
        raise ConfigError(f"{flag} {text!r}: give at least one")
    seen = set()
    for item, value in zip(items, values, strict=True):
        if value in seen:
            raise ConfigError(f"{flag} {text!r}: {item} is given twice; give each once")
        seen.add(value)
    return values


def shell_command(module: str, argv: Sequence[str]) -> str:
    """`python -m <module> <argv>` as one line a POSIX shell runs as given: an argument with single quotes (a -c
    with TOML strings) in double quotes where that needs no escapes, else shlex's quoting."""

    def quoted(arg: str) -> str:
        if shlex.quote(arg) == arg or any(c in arg for c in '"$`\\!'):
            return shlex.quote(arg)
        return f'"{arg}"'

    return " ".join(["python", "-m", module, *map(quoted, argv)])


def parse_value(flag: str, key: str, text: str) -> object:
    """One TOML value of a study flag (`--grid`, `--space`); a bad one is a ConfigError naming the flag."""
    try:
        return parse_overrides([f"{key}={text}"])[key]
    except ConfigError:
        raise ConfigError(f"{flag} {key}={text!r}: not a TOML value; write numbers as they are, true/false, "
                          f"strings in quotes ({key}='{text}')") from None  # fmt: skip


def parse_grid(text: str) -> list[tuple[tuple[str, object], ...]]:
    """`"lr=0.01,0.05 local-epochs=2,5"` → the cartesian product of (key, value) pairs (TOML values); a key or a
    value given twice is a ConfigError (the same runs twice)."""
    axes, keys = [], set()
    for item in text.split():
        key, sep, values = item.partition("=")
        if not sep or not values or not key:
            raise ConfigError(f"--grid {item!r}: write key=value1,value2")
        if key in keys:
            raise ConfigError(f"--grid: {key} is given twice; give its values once (key=value1,value2)")
        keys.add(key)
        axis = [parse_value("--grid", key, v) for v in values.split(",")]
        for i, value in enumerate(axis):
            if any(value == other and type(value) is type(other) for other in axis[:i]):
                raise ConfigError(f"--grid {item!r}: {values.split(',')[i]} is given twice; give each once")
        axes.append([(key, v) for v in axis])
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
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if status not in SETTLED or not all(ran.get(k) == v for k, v in explicit.items()):
        return None
    return None if damage(folder) else status  # a damaged run (a line of rounds.jsonl cut short) runs again


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


# --- signals ----------------------------------------------------------------------------------------------------

STUDY_SIGNALS = tuple(SIGNAL_EXIT)  # SIGINT, SIGTERM, SIGHUP
CHILD_GRACE_SECONDS = 30.0  # a stopped child's own clean-up (a flwr launch: its processes, then its reaper)


class Stopped(KeyboardInterrupt):
    """A signal stopped the study (raised by `stop_on_signals`' handler). A KeyboardInterrupt, so that an
    in-process run in flight records itself `interrupted` (fedsuite/server/loop.py) as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP raise Stopped (Python's default for SIGTERM and SIGHUP
    ends the process at once: no status written, child runs left running). A simulation.run launch inside installs
    its own handlers for its duration (Interrupted) and puts these back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in STUDY_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def ignore_signals() -> None:
    """A second Ctrl-C or SIGTERM must not cut the clean-up short."""
    if threading.current_thread() is threading.main_thread():
        for sig in STUDY_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def as_interrupted(err: BaseException) -> Interrupted:
    """Stopped, a plain KeyboardInterrupt or simulation.run's Interrupted → Interrupted (its exit_code: 130 for
    SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return err if isinstance(err, Interrupted) else Interrupted(getattr(err, "signum", signal.SIGINT))


def run_stoppable(command: Callable[[], int], rerun: str) -> int:
    """A study command's body, `command()`, with SIGINT, SIGTERM and SIGHUP stopping it as Ctrl-C does: its exit
    code, or, when a signal stopped it, the signal's (130, 143, 129) after one line saying how to continue."""
    with stop_on_signals():
        try:
            return command()
        except (Interrupted, KeyboardInterrupt) as err:
            ignore_signals()
            err = as_interrupted(err)
            print(f"interrupted ({err}); finished runs are kept; rerun to continue: {rerun}", file=sys.stderr)
            return err.exit_code


def mark_interrupted(folder: Path | None, reason: str) -> None:
    """The run in `folder` was stopped: a summary that still says `running` says `interrupted`, and what a
    cut-short write leaves (the reserve, temporary files) goes."""
    if folder is None:
        return
    mark_stopped(folder, "interrupted", reason)
    remove_temporaries(folder)


def stop_children(children: dict[Path | None, subprocess.Popen], signum: int) -> None:
    """Pass the signal on to every running child, wait for each to end (SIGKILL after CHILD_GRACE_SECONDS; a flwr
    launch's reaper still stops its processes), then mark each one's run interrupted."""
    for proc in children.values():
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
    deadline = time.monotonic() + CHILD_GRACE_SECONDS
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for folder in children:
        mark_interrupted(folder, f"the study was stopped by {signal.Signals(signum).name}")


# --- running ------------------------------------------------------------------------------------------------------


def _run_here(job: Job, engine: str) -> Outcome:
    try:
        if job.work is not None:
            return Outcome(job, "completed", value=job.work())
        launch(job.overrides(), engine, job.group)
        return Outcome(job, "completed")
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


def _child_command(job: Job, engine: str) -> list[str]:
    return [sys.executable, "-m", "simulation.experiment", "--run-one", json.dumps(job.overrides()),
            "--engine", engine, *(["--group", job.group] if job.group else [])]  # fmt: skip


def _run_children(jobs: Sequence[Job], todo: list[int], engine: str, parallel: int, progress: StudyProgress,
                  done: Callable[[int, Outcome], None]) -> None:  # fmt: skip
    """K jobs at once, each `python -m simulation.experiment --run-one …`; a job's status is its summary's. On a
    signal the running children are stopped and waited for (stop_children) before it propagates."""
    pending, running = list(todo), {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                index = pending.pop(0)
                print(f"── start {jobs[index].label} ──", flush=True)
                running[index] = subprocess.Popen(_child_command(jobs[index], engine), stdout=subprocess.DEVNULL,
                                                  cwd=PROJECT)  # fmt: skip
                progress.started(index, jobs[index].label, jobs[index].folder)
            for index, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[index]
                job = jobs[index]
                status = run_status(job.folder) if proc.returncode in (0, 1, 3) else "failed"
                print(f"── done {job.label}: {status} ──", flush=True)
                done(index, Outcome(job, status, "" if status == "completed" else f"exit code {proc.returncode}"))
            time.sleep(0.5)
    except (Interrupted, KeyboardInterrupt) as err:
        ignore_signals()
        stop_children({jobs[i].folder: proc for i, proc in running.items()}, as_interrupted(err).signum)
        raise


def planned_rounds(job: Job) -> int | None:
    """The job's num-server-rounds (for the progress estimate); None for a job with its own work."""
    if job.work is not None:
        return None
    try:
        return int(resolved(job.settings)["num-server-rounds"])
    except (ConfigError, KeyError, TypeError, ValueError):
        return None


def _damaged_earlier(job: Job) -> str | None:
    """Why a job whose folder holds a completed or diverged run is run again although its settings match: the
    run's files are damaged (report.damage)."""
    if job.folder is None or run_status(job.folder) not in SETTLED:
        return None
    return damage(job.folder)


def run_jobs(jobs: Sequence[Job], engine: str = "inprocess", parallel: int = 1, reuse: bool = False,
             on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:  # fmt: skip
    """Run every job (one at a time, or `parallel` at once as child processes); with `reuse`, a job whose folder
    holds a completed or diverged run with the same settings is not run again (a rerun would repeat it; a failed
    one is redone, and so is one whose files are damaged). A job that fails is recorded as such and the others
    still run. SIGINT, SIGTERM or SIGHUP stops the experiment: the runs in flight (children included) are stopped
    and waited for, their summaries say `interrupted`, and Interrupted is raised (its exit_code 130/143/129).
    Progress (runs done, each running run's round, time left) is shown meanwhile (simulation.progress).
    `on_done(outcome)` is called after each job. Returns the outcomes in the order of `jobs`."""
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
            continue
        if reuse and (why := _damaged_earlier(job)):
            print(f"── {job.label} ──\n   damaged: {why}", flush=True)
        todo.append(index)
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
                for index in todo:
                    print(f"── {jobs[index].label} ──", flush=True)
                    progress.started(index, jobs[index].label, jobs[index].folder)
                    outcome = _run_here(jobs[index], engine)
                    if not outcome.completed:
                        print(f"   {outcome.status}: {outcome.message}", flush=True)
                    done(index, outcome)
        except (Interrupted, KeyboardInterrupt) as err:
            ignore_signals()
            raise as_interrupted(err) from None
    return [outcomes[i] for i in range(len(jobs))]


def end_with_parent() -> None:
    """This child gets SIGTERM when the process that started it ends, even by SIGKILL (Linux's parent-death
    signal), so no run goes on writing after its study has gone."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.experiment", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-one", required=True, help="one run's overrides as JSON")
    parser.add_argument("--engine", choices=ENGINES, default="flwr")
    parser.add_argument("--group", default=None, help="experiment tracking group (a sweep's name)")
    args = parser.parse_args(argv)
    end_with_parent()
    overrides = json.loads(args.run_one)
    folder = Path(overrides["out-dir"]) / overrides["run-name"] if "run-name" in overrides else None
    with stop_on_signals():
        try:
            launch(overrides, args.engine, args.group)
            return 0
        except RunFailed as err:
            return err.exit_code
        except (Interrupted, KeyboardInterrupt) as err:
            ignore_signals()
            err = as_interrupted(err)
            mark_interrupted(folder, str(err))
            return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
