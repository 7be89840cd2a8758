"""Test-session setup: a marker in the environment that every process a test launches inherits, so the checks
"no process of the launch is left" see only this session's launches, not those of another session running at the
same time on the machine (`simulation.launcher.processes.tagged_processes(env=SESSION)`)."""

from __future__ import annotations

import os
import uuid

SESSION_KEY = "FEDSUITE_TEST_SESSION"
os.environ.setdefault(SESSION_KEY, uuid.uuid4().hex)
SESSION = {SESSION_KEY: os.environ[SESSION_KEY]}
