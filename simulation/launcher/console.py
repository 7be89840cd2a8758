"""Flower's output during a launch: all of it to `flwr.log` in the results folder, a filtered copy to the console
(over-long lines cut, our own abort's traceback and Flower's misleading notices left out)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fedsuite.results.folder import append_atomic, full_message, is_disk_full
from simulation.launcher.project import PROJECT

CLOSING_LINE = re.compile(r"fedsuite │ run (completed|failed|diverged|interrupted) │")
# Flower's lines that say nothing true about a run simulation.run sized itself (flwr.log keeps them): the notice
# about the default federation size and its resize hint, printed whatever the size, and the Ray actors' shutdown.
FLOWER_NOISE = (
    "default simulated SuperNodes changed from",
    "To change federation size, use the following command",
    "flwr federation simulation-config",
    "Manually terminating ClientAppActor",
    "Flower configuration not found. Created default configuration",  # the launch's own private FLWR_HOME
)
CONSOLE_LINE_CHARS = 400  # longer lines (e.g. a warning that prints a 100-number list) are cut on the console


class LaunchLog:
    """flwr.log, appended one whole line at a time. A write that fails (a full out-dir) is cut off again and
    ends the log; `full` then holds the one-line message of a full out-dir."""

    def __init__(self, path: Path):
        self.path = path
        self.full: str | None = None
        self.failed = False

    def write(self, line: str) -> None:
        if self.failed:
            return
        try:
            append_atomic(self.path, line)
        except OSError as err:
            self.failed = True
            if is_disk_full(err):
                self.full = full_message(self.path.parent, self.path.name, err)
            else:
                print(f"warning: {self.path} cannot be written ({err.strerror or err}); the console keeps Flower's "
                      "output", file=sys.stderr, flush=True)  # fmt: skip


def stream(cmd: list[str], env: dict[str, str], log: LaunchLog, quiet: bool) -> str | None:
    """Run `flwr run --stream`, copying its output to flwr.log and (filtered by ConsoleFilter) to the console;
    returns the run id."""
    run_id = None
    console = ConsoleFilter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=PROJECT,
                            start_new_session=True)  # fmt: skip
    try:
        for line in proc.stdout:
            log.write(line)
            if not quiet:
                sys.stdout.write(console(line))
                sys.stdout.flush()
            found = re.search(r"Successfully started run (\d+)", line)
            run_id = run_id or (found.group(1) if found else None)
        if not quiet:
            sys.stdout.write(console.flush())
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    return run_id


class ConsoleFilter:
    """What of Flower's stream the console shows (flwr.log keeps everything): over-long lines are cut, and the
    traceback of a run that fedsuite itself stopped (RunAborted: its reason was logged in one line already) is
    left out."""

    def __init__(self):
        self.block: list[str] | None = None

    def __call__(self, line: str) -> str:
        if self.block is None:
            if line.startswith("Traceback (most recent call last):"):
                self.block = [line]
                return ""
            if "fedsuite │ failed: " in line and _full_disk(line):  # said once, at the end, by simulation.run
                return ""
            if CLOSING_LINE.search(line) or any(noise in line for noise in FLOWER_NOISE):
                return ""  # the ServerApp's closing line (simulation.run ends with its own), Flower's noise
            return _cut(line)
        if line[:1].isspace() or not line.strip():
            self.block.append(line)
            return ""
        block, self.block = self.block + [line], None
        if "RunAborted: " in line:
            return "(the ServerApp stopped the run: reason above; traceback in flwr.log)\n"
        if _full_disk(line):  # the one line that says so comes at the end
            return ""
        return "".join(_cut(text) for text in block)

    def flush(self) -> str:
        block, self.block = self.block or [], None
        return "".join(_cut(text) for text in block)


def _full_disk(line: str) -> bool:
    return "OutDirFull: " in line or "[Errno 28]" in line


def _cut(line: str) -> str:
    if len(line) <= CONSOLE_LINE_CHARS:
        return line
    return line[:CONSOLE_LINE_CHARS] + " … (cut here; the whole line is in flwr.log)\n"
