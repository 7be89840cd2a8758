"""Marks a study's in-process run `interrupted` when the study's process ends before the run does, even by SIGKILL.

    python -m simulation.experiment.watcher      (started by the runner, simulation/experiment/runner.py)

A run of `--engine inprocess` trains inside the study's process. A signal the study can catch marks the run itself
(simulation/experiment/signals.py), but SIGKILL (or the kernel's out-of-memory killer) gives it no chance, and the
run's summary.json said `running` for ever; a `flwr run` launch has simulation.run's reaper for this, and this is
the in-process runs' one. The study writes the results folder of each run it starts in its own process to this
process's standard input, and an empty line when the run has returned; the kernel closes the pipe when the study
ends, for any reason. A run still in flight then is marked `interrupted`, and what its cut-short writes left
(temporary files, the reserve) and its per-run client-state folder (in RAM for client-state memory) go. It runs in
a session of its own, so a Ctrl-C or a signal to the study's process group does not reach it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REASON = "the study that ran it in its own process ended before the run did"


class Watcher:
    """The study's side: one watcher process, started on first use, told which run is in flight."""

    process: subprocess.Popen | None = None

    @classmethod
    def tell(cls, folder: Path | None) -> None:
        """`folder`'s run is now in flight in this process (None: no run is)."""
        if cls.process is None or cls.process.poll() is not None:
            if folder is None:
                return
            cls.process = subprocess.Popen([sys.executable, "-m", "simulation.experiment.watcher"],
                                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
                                           cwd=Path(__file__).resolve().parents[2])  # fmt: skip
        try:
            cls.process.stdin.write(f"{folder or ''}\n".encode())
            cls.process.stdin.flush()
        except OSError:  # the watcher is gone (killed): the run goes on unwatched, as before
            pass


def in_flight(lines) -> Path | None:
    """The run in flight when the study's lines end: the last folder named, unless an empty line followed it."""
    folder = None
    for line in lines:
        text = line.decode(errors="replace").rstrip("\n") if isinstance(line, bytes) else line.rstrip("\n")
        folder = Path(text) if text else None
    return folder


def settle(folder: Path, ended: float) -> None:
    """Mark the run in `folder` interrupted (a summary that still says `running`), remove what its cut-short writes
    left and its per-run client-state folder; each step runs whatever the one before met."""
    from simulation.launcher.reaper import settle_stopped

    for problem in settle_stopped(folder, "interrupted", REASON, ended=ended):
        print(f"fedsuite watcher: {folder}: {problem}", file=sys.stderr)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    folder = in_flight(sys.stdin.buffer)
    if folder is not None:
        settle(folder, time.time())
    return 0


if __name__ == "__main__":
    sys.exit(main())
