"""What a study shows while it runs: runs done/total, the round each running run has reached, the elapsed time and
an estimate of the time left; and, at the end, the files it wrote.

The round of a run is read from the run's own `rounds.jsonl` as it grows (a child process or an in-process run
writes it after every round), so nothing is plumbed into the server. On a terminal the display is a `rich` live
panel at the bottom of the screen (the study's own lines scroll above it); elsewhere (CI, tests, a pipe) it is a
plain line after every run and, while a run is in flight, at most every `plain_every` seconds.

The estimate counts rounds: the rounds the runs still to do will train, at the rate the runs of this invocation
have trained so far (reused runs do not count); before the first round has ended there is none.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 1.0
PLAIN_EVERY = 30.0
TAIL_BYTES = 65536


def latest_round(folder: Path | None, since: float = 0.0) -> int:
    """The last round written to `folder`/rounds.jsonl (0 when none yet, or when the file predates `since`, a
    time.time(): an earlier run that the new one replaces). A line still being written is skipped."""
    if folder is None:
        return 0
    path = folder / "rounds.jsonl"
    try:
        if path.stat().st_mtime < since:
            return 0
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL_BYTES))
            tail = f.read()
    except OSError:
        return 0
    for line in reversed(tail.splitlines()):
        try:
            return int(json.loads(line)["round"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class Running:
    label: str
    folder: Path | None
    rounds: int | None  # the run's num-server-rounds, None when unknown
    started: float  # time.time()
    round: int = 0


class StudyProgress:
    """Progress of `total` runs (those to run now; `reused` more ended earlier). `rounds`: each run's
    num-server-rounds by job index (None: unknown). Use as a context manager; call `started(index, label, folder)`
    and `finished(index, status)` as runs start and end."""

    def __init__(self, total: int, rounds: dict[int, int | None], reused: int = 0, live: bool | None = None,
                 plain_every: float = PLAIN_EVERY, stream=None):  # fmt: skip
        self.total, self.reused, self.rounds = total, reused, rounds
        self.stream = stream or sys.stdout
        self.live = _is_terminal(self.stream) if live is None else live
        self.plain_every = plain_every
        self.running: dict[int, Running] = {}
        self.done = 0
        self.rounds_done = 0  # rounds of the runs that ended in this invocation
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._display = None
        self._last_plain = time.monotonic()
        self._last_shown: tuple = ()

    # --- the runner's calls -----------------------------------------------------------------------------------------

    def started(self, index: int, label: str, folder: Path | None) -> None:
        with self._lock:
            self.running[index] = Running(label, folder, self.rounds.get(index), time.time())

    def finished(self, index: int, status: str) -> None:
        with self._lock:
            run = self.running.pop(index, None)
            self.done += 1
            if run is not None:
                run.round = max(run.round, latest_round(run.folder, run.started))
                self.rounds_done += run.rounds if status == "completed" and run.rounds else run.round
        if not self.live:
            self._print(self.line())

    # --- what is shown ----------------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float | None:
        """Seconds left, from the rounds trained so far in this invocation (None before the first)."""
        elapsed = self.elapsed()
        trained = self.rounds_done + sum(r.round for r in self.running.values())
        known = all(n is not None for n in self.rounds.values())
        if known and trained > 0:
            todo = sum(self.rounds.values()) - trained
            return max(todo, 0) * elapsed / trained
        if self.done:  # some run's length is unknown: by runs
            return (self.total - self.done) * elapsed / self.done
        return None

    def line(self) -> str:
        """`runs 3/12 done (4 reused) │ fedavg seed 1: round 7/20 │ elapsed 1m02s │ about 3m10s left`."""
        with self._lock:
            for run in self.running.values():
                run.round = max(run.round, latest_round(run.folder, run.started))
            parts = [f"runs {self.done}/{self.total} done" + (f" ({self.reused} reused)" if self.reused else "")]
            parts += [f"{r.label}: round {r.round}/{r.rounds or '?'}" for r in self.running.values()]
            left = self.left()
            parts += [f"elapsed {duration(self.elapsed())}", f"about {duration(left)} left" if left is not None
                      else "time left: after the first round"]  # fmt: skip
        return "progress: " + " │ ".join(parts)

    def __rich__(self):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(width=30)
        table.add_column(no_wrap=True)
        with self._lock:
            for run in self.running.values():
                run.round = max(run.round, latest_round(run.folder, run.started))
                table.add_row(run.label, ProgressBar(total=run.rounds or None, completed=run.round),
                              f"round {run.round}/{run.rounds or '?'}")  # fmt: skip
            runs = "runs" + (f" ({self.reused} reused)" if self.reused else "")
            table.add_row(runs, ProgressBar(total=max(self.total, 1), completed=self.done), f"{self.done}/{self.total}")
            left = self.left()
        times = f"elapsed {duration(self.elapsed())}" + (f", about {duration(left)} left" if left is not None else "")
        return Group(table, times)

    # --- the display ------------------------------------------------------------------------------------------------

    def __enter__(self) -> StudyProgress:
        if self.total == 0:
            return self
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._display = Live(self, console=Console(file=self.stream), refresh_per_second=2, transient=True)
            self._display.start()
        else:
            self._thread = threading.Thread(target=self._plain_loop, name="study-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._display is not None:
            self._display.stop()

    def _plain_loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if time.monotonic() - self._last_plain < self.plain_every or not self.running:
                continue
            shown = tuple((r.label, latest_round(r.folder, r.started)) for r in list(self.running.values()))
            if shown != self._last_shown:
                self._last_shown = shown
                self._print(self.line())

    def _print(self, text: str) -> None:
        self._last_plain = time.monotonic()
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed pipe must not end the study
            pass


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def print_written(paths: Sequence[Path], stream=None) -> None:
    """The closing lines: every file the study wrote (those that exist)."""
    written = [p for p in paths if p.exists()]
    if written:
        print("wrote:\n" + "\n".join(f"  {p}" for p in written), file=stream or sys.stdout, flush=True)
