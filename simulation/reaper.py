"""Cleans up after one launch of simulation.run, however the driver ends (normal exit, exception, SIGKILL).

    python -m simulation.reaper <token> <results folder> <flwr home>     (started by simulation.run)

It waits for its standard input to close: the driver holds the other end, and the kernel closes it when the
driver exits for any reason. Then it stops every process carrying the launch's token (simulation.processes),
marks a summary.json that still says `running` as `interrupted`, and removes the launch's private FLWR_HOME and
the run's per-run client-state folder (in RAM for client-state memory; checkpoints hold their own copies).
It runs in a session of its own, so a Ctrl-C or a signal to the driver's process group does not reach it.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

from fedsuite.results import mark_stopped
from fedsuite.state import is_run_scoped
from simulation.processes import stop_tagged


def remove_run_state(folder: Path) -> None:
    """The per-run client-state folder the ServerApp named in config.json (never a configured client-state-dir)."""
    try:
        meta = json.loads((folder / "config.json").read_text())
        root, run_id = meta.get("client_state_dir"), int(meta.get("run_id", -1))
    except (OSError, ValueError, TypeError):
        return
    if root and is_run_scoped(Path(root), run_id):
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    token, folder, flwr_home = argv if argv is not None else sys.argv[1:]
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    sys.stdin.buffer.read()  # returns at EOF: the driver closed the pipe or died
    left = stop_tagged(token)
    mark_stopped(Path(folder), "interrupted", "the command that started the run ended before the run did")
    if flwr_home:
        shutil.rmtree(flwr_home, ignore_errors=True)
    remove_run_state(Path(folder))
    if left:
        print(f"fedsuite reaper: processes {left} did not stop", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
