"""The processes of one launch: tagged by an environment variable, found through /proc, stopped together.

`flwr run` starts a detached SuperLink, which starts a SuperExec, which starts `flwr-simulation`, which starts
Ray's daemons and workers: none of them is a child the driver could wait for, and several leave the driver's
session. Every one of them inherits the environment, so simulation.run puts a fresh token in it
(`FEDSUITE_RUN_TOKEN`) and stops exactly the processes that carry that token — on Ctrl-C, SIGTERM, at the end
of a run, and (through the reaper, `python -m simulation.reaper`) when the driver itself was killed.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from fedsuite.results import RUN_TOKEN_ENV


def new_token() -> str:
    return uuid.uuid4().hex


def tagged_processes(token: str | None = None, env: dict[str, str] | None = None) -> list[int]:
    """PIDs whose environment holds RUN_TOKEN_ENV (= token, or any value when token is None) and every `env`
    variable with its value (e.g. a test session's marker, so that concurrent sessions do not see each other's
    launches), except this process."""
    needle = f"{RUN_TOKEN_ENV}={token}".encode() + b"\0" if token else f"{RUN_TOKEN_ENV}=".encode()
    extra = [f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items()]
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if all((b"\0" + environ + b"\0").find(b"\0" + n) >= 0 for n in (needle, *extra)):
            pids.append(int(entry.name))
    return pids


def stop_tagged(token: str, grace_seconds: float = 3.0, give_up_seconds: float = 20.0) -> list[int]:
    """SIGTERM every process of the launch, SIGKILL what is left after `grace_seconds`, until none is left
    (processes that start meanwhile are caught by the next scan). Returns the PIDs still alive (normally [])."""
    start = time.monotonic()
    termed: set[int] = set()
    while True:
        pids = tagged_processes(token)
        if not pids:
            return []
        late = time.monotonic() - start > grace_seconds
        if time.monotonic() - start > give_up_seconds:
            return pids
        for pid in pids:
            if pid in termed and not late:
                continue
            try:
                os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            termed.add(pid)
        time.sleep(0.2)
