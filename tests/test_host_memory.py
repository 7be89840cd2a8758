"""reuse-host-memory: a freed model-sized buffer stays in the process's heap for the next one (glibc), the setting
can be undone, every process of a run applies its value, and nothing computed changes."""

from __future__ import annotations

import ctypes
import logging
import subprocess
import sys

import numpy as np
import pytest

from fedsuite.node import app as client_app
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server import app as server_app
from fedsuite.state import host_memory

glibc = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc ≥ 2.33 only (mallinfo2)")

# In a fresh process, in its main thread and then in another: whether glibc holds a 128 MiB buffer in a mapping of its
# own (hblkhd) while it lives, then
# whether a second one, after the first was freed, is served by the heap without growing it (the freed pages
# reused) rather than by a new mapping.
PROBE = """
import ctypes, sys, threading
import numpy as np
from fedsuite.state.host_memory import reuse_host_memory

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
for setting in sys.argv[1:]:
    assert reuse_host_memory(setting == "on"), setting

def probe():
    first = np.ones(1 << 25, np.float32)  # 128 MiB: above a thread arena's 64 MiB pieces too
    mapped = libc.mallinfo2().hblkhd
    del first
    arena = libc.mallinfo2().arena
    second = np.ones(1 << 25, np.float32)
    now = libc.mallinfo2()
    print(mapped >= 1 << 27, now.hblkhd < 1 << 27 and now.arena == arena)

probe()
worker = threading.Thread(target=probe)  # a thread other than the main one
worker.start()
worker.join()
"""


def probe(*settings: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, *settings], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@glibc
def test_a_freed_buffer_is_reused_only_with_the_setting_on():
    assert probe() == "True False\nTrue False"  # glibc's default: a mapping of its own, given back on free
    assert probe("on") == "False True\nFalse True"  # in the heap, and the freed pages serve the next buffer
    assert probe("on", "off") == "True False\nTrue False"  # undone: glibc's initial values again
    assert probe("off") == "True False\nTrue False"  # never turned on: nothing asked of glibc


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
    returned = run_inprocess({**RUN, "reuse-host-memory": False}).x
    kept = run_inprocess({**RUN, "reuse-host-memory": True}).x  # last: the default, as every other test runs
    assert np.array_equal(kept, returned)


def test_a_refused_setting_is_said_once_and_reported(monkeypatch, caplog):
    monkeypatch.setattr(host_memory, "_state", None)
    monkeypatch.setattr(host_memory, "_warned", False)
    monkeypatch.setattr(host_memory, "_mallopt", lambda: lambda param, value: 0)  # a glibc that refuses everything
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        assert host_memory.reuse_host_memory(True) is False
        assert host_memory.reuse_host_memory(True) is False
    lines = [r.getMessage() for r in caplog.records if "reuse-host-memory" in r.getMessage()]
    assert lines == ["fedsuite │ reuse-host-memory=true: not applied (glibc refused a setting); freed host buffers "
                     "are handled as the C library does by default"]  # fmt: skip
    monkeypatch.setattr(host_memory, "_mallopt", lambda: None)
    monkeypatch.setattr(host_memory, "_warned", False)
    assert host_memory.reuse_host_memory(True) is False


def test_a_glibc_that_refuses_a_high_mmap_threshold_gets_no_own_mappings_instead(monkeypatch):
    """glibc before 2.36 may refuse a mmap threshold above 32 MiB: then no request gets pages of its own."""
    calls = []

    def old_glibc(param, value):
        calls.append((param, value))
        return 0 if param == host_memory.M_MMAP_THRESHOLD and value > 32 * 2**20 else 1

    monkeypatch.setattr(host_memory, "_state", None)
    monkeypatch.setattr(host_memory, "_mallopt", lambda: old_glibc)
    assert host_memory.reuse_host_memory(True) is True
    assert calls == [(host_memory.M_MMAP_THRESHOLD, 1 << 30), (host_memory.M_MMAP_MAX, 0),
                     (host_memory.M_TRIM_THRESHOLD, 2**31 - 1), (host_memory.M_ARENA_MAX, 1)]  # fmt: skip
