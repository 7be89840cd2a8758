"""reuse-host-memory: a freed model-sized buffer stays in the process's heap for the next one (glibc), the setting
can be undone, every process of a run applies its value, and nothing computed changes."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from fedsuite import client_app, server_app
from fedsuite.inprocess import run_inprocess

glibc = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc ≥ 2.33 only (mallinfo2)")

# In a fresh process: the bytes glibc holds in mapped blocks of their own (hblkhd) while a 64 MiB buffer lives, then
# whether a second one, after the first was freed, is served by the heap without growing it (the freed pages
# reused) rather than by a new mapping.
PROBE = """
import ctypes, sys
import numpy as np
from fedsuite.host_memory import reuse_host_memory

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
for setting in sys.argv[1:]:
    assert reuse_host_memory(setting == "on"), setting
first = np.ones(1 << 24, np.float32)  # 64 MiB
mapped = libc.mallinfo2().hblkhd
del first
arena = libc.mallinfo2().arena
second = np.ones(1 << 24, np.float32)
now = libc.mallinfo2()
print(mapped >= 1 << 26, now.hblkhd < 1 << 26 and now.arena == arena)
"""


def probe(*settings: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, *settings], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@glibc
def test_a_freed_buffer_is_reused_only_with_the_setting_on():
    assert probe() == "True False"  # glibc's default: a mapping of its own, given back on free
    assert probe("on") == "False True"  # in the heap, and the freed pages serve the next buffer
    assert probe("on", "off") == "True False"  # undone: glibc's initial values again
    assert probe("off") == "True False"  # never turned on: nothing asked of glibc


RUN = {
    "algorithm": "scaffold", "dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 2,
    "synthetic-dim": 5, "synthetic-samples": 12, "batch-size": 4, "local-steps": 3, "lr": 0.02,
    "num-server-rounds": 2, "eval-every": 1000,
}  # fmt: skip


@pytest.mark.parametrize("on", [True, False])
def test_the_server_and_every_client_apply_the_runs_value(on, monkeypatch):
    calls = []
    monkeypatch.setattr(server_app, "reuse_host_memory", lambda value: calls.append(("server", value)))
    monkeypatch.setattr(client_app, "reuse_host_memory", lambda value: calls.append(("client", value)))
    run_inprocess({**RUN, "reuse-host-memory": on})
    assert calls[0] == ("server", on)  # before anything is built
    assert ("client", on) in calls and {value for _, value in calls} == {on}


def test_the_numbers_do_not_depend_on_the_setting():
    kept = run_inprocess({**RUN, "reuse-host-memory": True}).x
    returned = run_inprocess({**RUN, "reuse-host-memory": False}).x
    assert np.array_equal(kept, returned)
