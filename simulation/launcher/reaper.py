"""Cleans up after one launch of simulation.run, however the driver ends (normal exit, exception, SIGKILL).

    python -m simulation.launcher.reaper <token> <results folder> <flwr home> [<ray folder>]

(started by simulation.run's launch)

It waits for its standard input to close: the driver holds the other end, and the kernel closes it when the
driver exits for any reason. Meanwhile it records the launch's process tree every second (simulation.launcher.processes:
Ray's agents lose the token from their environment, not their place in the tree). Then it leaves the stop note for the
ServerApp (fedsuite.run.stop_note: a failure the stop causes is recorded as the stop), stops every process of the
launch, marks a summary.json that still says `running` as `interrupted` (one that says `failed` too when written
after the driver ended: the stop caused that failure), removes the launch's private FLWR_HOME and Ray folder,
temporary files a cut-short write left in the results folder, and the run's per-run client-state folder (in RAM
for client-state memory; checkpoints hold their own copies). Each step runs whatever the one before met
(a full disk must not leave the FLWR_HOME behind).
It runs in a session of its own, so a Ctrl-C or a signal to the driver's process group does not reach it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sys
import time
from pathlib import Path

from fedsuite.results.folder import mark_stopped, remove_temporaries
from fedsuite.run.stop_note import leave_stop_note
from fedsuite.state.folders import is_run_scoped
from simulation.launcher.processes import Launch

RECORD_SECONDS = 1.0
DRIVER_ENDED = "the command that started the run ended before the run did"


def settle_stopped(folder: Path, status: str, reason: str, *, ended: float | None = None,
                   stopped_at: float | None = None, also=()) -> list[str]:  # fmt: skip
    """A run that stopped without writing its end: its summary marked `status` (if it still says running), then the
    steps of `also`, then what its cut-short writes left (those older than `ended`, if given) and its per-run
    client-state folder removed. Each step runs whatever the one before met; returns the problems met."""
    steps = (lambda: mark_stopped(folder, status, reason, stopped_at=stopped_at), *also,
             lambda: remove_temporaries(folder, older_than=ended), lambda: remove_run_state(folder))  # fmt: skip
    problems = []
    for step in steps:
        try:
            step()
        except Exception as err:  # the next step must still run
            problems.append(f"{type(err).__name__}: {err}")
    return problems


def remove_run_state(folder: Path) -> None:
    """The per-run client-state folder the ServerApp named in config.json (never a configured client-state-dir)."""
    try:
        meta = json.loads((folder / "config.json").read_text())
        root, run_id = meta.get("client_state_dir"), int(meta.get("run_id", -1))
    except (OSError, ValueError, TypeError):
        return
    if root and is_run_scoped(Path(root), run_id):
        shutil.rmtree(root, ignore_errors=True)


def wait_for_driver(launch: Launch, stream=None) -> None:
    """Until `stream` (stdin) reaches its end, record the launch's processes every RECORD_SECONDS."""
    fd = (stream or sys.stdin.buffer).fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], RECORD_SECONDS)
        if ready and not os.read(fd, 65536):
            return
        try:
            launch.scan(thorough=False)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    token, folder, flwr_home, *rest = argv if argv is not None else sys.argv[1:]
    ray_dir = rest[0] if rest else ""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    launch = Launch(token, ray_dir or None)
    wait_for_driver(launch)
    ended = time.time()
    leave_stop_note(Path(flwr_home), token, DRIVER_ENDED, ended)  # the ServerApp records the stop, not its effects
    left = launch.stop()
    # the summary first: the launch's folders may take a while to remove on a busy machine
    private = (lambda: [shutil.rmtree(p, ignore_errors=True) for p in (flwr_home, ray_dir) if p],)
    problems = settle_stopped(Path(folder), "interrupted", DRIVER_ENDED, ended=ended, stopped_at=ended, also=private)
    if left:
        problems.append(f"processes {left} did not stop")
    for problem in problems:
        print(f"fedsuite reaper: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
