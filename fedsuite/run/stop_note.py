"""The stop note: what a launch of `python -m simulation.run` leaves for its ServerApp before it stops the run
(docs/reliability.md#how-a-stop-is-recorded).

A launch stops its run by signalling every process of it at once (simulation.launcher.processes): the driver on
Ctrl-C, SIGTERM or SIGHUP, its reaper when the driver died. The Ray workers can die before the ServerApp's process
has handled its own signal, more so on a loaded machine, and the ServerApp then sees lost workers, a real failure
by every sign it has. So before the first signal the launch writes this note into its private FLWR_HOME, which
every Flower process of the launch has in its environment; the ServerApp's recorder reads it before it records a
failure (fedsuite.server.loop.StopAwareRecorder), and the run is recorded `interrupted` with the stop's reason,
never `failed` first.

Only light imports here: the reaper reads and writes the note too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fedsuite.results.folder import RUN_TOKEN_ENV, write_atomic

STOP_NOTE = "fedsuite-stop.json"


@dataclass(frozen=True)
class Stop:
    """A stop that has begun: why, and when (time.time())."""

    reason: str
    at: float


def leave_stop_note(flwr_home: Path, token: str, reason: str, at: float) -> bool:
    """Write the note for the launch with this token (atomically: a reader sees all of it or nothing); True if
    written. A note that cannot be written is only skipped: the launch still stops and marks the run afterwards."""
    try:
        write_atomic(Path(flwr_home) / STOP_NOTE, json.dumps({"token": token, "reason": reason, "at": at}))
    except OSError:  # write_atomic leaves no partial file behind
        return False
    return True


def stop_note(env: Mapping[str, str] | None = None) -> Stop | None:
    """The note of the launch this process belongs to (FLWR_HOME and the launch's token in `env`, default this
    process's environment), or None: no launch, no stop begun, or a note of another launch."""
    env = os.environ if env is None else env
    home, token = env.get("FLWR_HOME"), env.get(RUN_TOKEN_ENV)
    if not home or not token:
        return None
    try:
        note = json.loads((Path(home) / STOP_NOTE).read_text())
        if note.get("token") != token:
            return None
        return Stop(str(note["reason"]), float(note["at"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
