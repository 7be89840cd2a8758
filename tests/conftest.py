"""Test-session setup: a marker in the environment that every process a test launches inherits, so the checks
"no process of the launch is left" see only this session's launches, not those of another session running at the
same time on the machine (`simulation.launcher.processes.tagged_processes(env=SESSION)`), nor those of the other
pytest-xdist worker of this run."""

from __future__ import annotations

import os
import uuid

SESSION_KEY = "FEDSUITE_TEST_SESSION"
WORKER_KEY = "FEDSUITE_TEST_SESSION_WORKER"
# Under pytest-xdist (`-n 2`) each worker is a session of its own, so that one worker's check that its launches left
# nothing running never sees the other worker's launches; a process a test starts inherits its worker's tag.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if SESSION_KEY not in os.environ or os.environ.get(WORKER_KEY, "") != _worker:
    os.environ[SESSION_KEY] = uuid.uuid4().hex
    os.environ[WORKER_KEY] = _worker
SESSION = {SESSION_KEY: os.environ[SESSION_KEY]}
