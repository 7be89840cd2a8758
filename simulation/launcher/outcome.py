"""How a launch ended: completed, or RunFailed (failed, diverged) or Interrupted (a signal), each with its exit
code; the status is summary.json's, which Flower's must not contradict."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from fedsuite.results.folder import FINISHED, STATUSES, draw_missing_plot, mark_stopped
from fedsuite.server.pruning import PRUNED

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
STOPPED_BY_FLOWER = "stopped on its SuperLink (`flwr stop`): Flower reports finished:stopped"


class RunFailed(RuntimeError):
    """The run ended but did not complete: `status` is failed, diverged or interrupted (by Flower: `flwr stop`),
    `folder` holds what it wrote."""

    def __init__(self, message: str, status: str = "failed", folder: Path | None = None):
        super().__init__(message)
        self.status, self.folder = status, folder

    @property
    def exit_code(self) -> int:
        return STATUSES.get(self.status, 1)


class Interrupted(RuntimeError):
    """A signal stopped the run; every process of the launch has been stopped."""

    def __init__(self, signum: int, folder: Path | None = None):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.folder = signum, folder
        self.at = time.time()  # a failure the run reports after this came of the stop (results.mark_stopped)

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT.get(self.signum, 128 + self.signum)


def raise_interrupted(signum, frame):
    raise Interrupted(signum)


def outcome(folder: Path, run_id: str, flower_status: str, full: str | None = None) -> Path:
    """The run's status: summary.json's, which Flower's must not contradict. `full`: the message of an out-dir
    that filled up under flwr.log (the ServerApp may not have been able to say so)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    status, reason = summary.get("status"), summary.get("reason")
    if status in (*FINISHED, PRUNED) and flower_status == "finished:completed":  # pruned: stopped as asked
        if full:
            print(f"warning: {full} (flwr.log is incomplete; the results are whole)", file=sys.stderr)
        return folder
    if status in ("failed", "diverged", "interrupted"):  # interrupted: by Flower (`flwr stop`), the ServerApp says
        raise RunFailed(f"run {run_id} {status}: {reason}", status, folder)
    if flower_status == "finished:stopped" and mark_stopped(folder, "interrupted", STOPPED_BY_FLOWER):
        raise RunFailed(f"run {run_id} interrupted: {STOPPED_BY_FLOWER}", "interrupted", folder)
    if full:
        written = mark_stopped(folder, "failed", full)
        where = "" if written else " (summary.json could not be updated: it still says running)"
        raise RunFailed(f"run {run_id} failed: {full}{where}", "failed", folder)
    reason = f"Flower reports {flower_status}; see the ServerApp's error in {folder / 'flwr.log'}"
    if not mark_stopped(folder, "failed", reason) and summary:
        reason = f"Flower reports {flower_status} but summary.json says {status}"
    raise RunFailed(f"run {run_id} failed: {reason}", "failed", folder)


def ended_before_the_signal(err: Interrupted) -> str | None:
    """The final status of a run that had ended as it was asked to (completed, budget-spent) when the signal
    arrived, else None; its plot drawn if the signal cut it off."""
    if err.folder is None:
        return None
    try:
        status = json.loads((err.folder / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        return None
    if status not in FINISHED:
        return None
    draw_missing_plot(err.folder)
    return status
