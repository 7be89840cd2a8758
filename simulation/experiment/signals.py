"""SIGINT, SIGTERM and SIGHUP stop a study alike: the runs in flight (child processes included) are stopped and
waited for, marked `interrupted`, and the command says how to continue. A signal that arrives while an in-process
run writes its end (its last round's row, summary and plot) waits until the run has returned: that run completed,
whole, and the study stops after it (`deferring`, `raise_deferred`)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fedsuite.results.folder import mark_stopped, remove_temporaries
from simulation.launcher.outcome import SIGNAL_EXIT, Interrupted

STUDY_SIGNALS = tuple(SIGNAL_EXIT)  # SIGINT, SIGTERM, SIGHUP
CHILD_GRACE_SECONDS = 30.0  # a stopped child's own clean-up (a flwr launch: its processes, then its reaper)


class Stopped(KeyboardInterrupt):
    """A signal stopped the study (raised by `stop_on_signals`' handler). A KeyboardInterrupt, so that an
    in-process run in flight records itself `interrupted` (fedsuite/server/loop.py) as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class _Deferral:
    """Whether an in-process run is writing its end (a signal then waits), and the signal that waits."""

    finishing = False
    pending: int | None = None


def _raise_stopped(signum, frame):
    if _Deferral.finishing and _Deferral.pending is None:  # the run's last writes end first; a second signal stops
        _Deferral.pending = signum
        return
    raise Stopped(signum)


def run_finishing() -> None:
    """An in-process run has recorded its last round (fedsuite.server.observers `recorded`): until it returns, a
    signal waits (inside `deferring`)."""
    _Deferral.finishing = True


@contextlib.contextmanager
def deferring() -> Iterator[None]:
    """Around one in-process run: a signal after `run_finishing` waits for the run to return, and is kept for
    `raise_deferred` (the caller records the run's outcome first)."""
    _Deferral.finishing, _Deferral.pending = False, None
    try:
        yield
    finally:
        _Deferral.finishing = False


def raise_deferred() -> None:
    """Stop now (Stopped) if a signal waited for the last run to finish; after that run's outcome is recorded."""
    signum, _Deferral.pending = _Deferral.pending, None
    if signum is not None:
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
