"""Large host buffers kept in the process for reuse (run-config key reuse-host-memory;
docs/performance.md#host-memory-freed-buffers-kept-for-reuse).

A round allocates and frees buffers the size of the model many times: each client's copy of the downlink, the
bytes of its reply, the rule's temporaries, the server's copies. glibc's allocator serves every request above its
mmap threshold (128 KiB, raised with use to at most 32 MiB) with fresh pages from the kernel and returns them when
the buffer is freed, so a buffer of 45 MB (a model of 11 M floats) costs 11 000 zero-filled page faults each time
it is allocated, and a round of 10 such clients hundreds of thousands. With a mmap threshold above the model's
size, a high trim threshold and one arena for every thread (a thread's own arena grows in pieces of at most 64 MiB
and maps anything larger afresh), freed buffers stay in the process's heap and the next allocation reuses them.
Nothing computed changes; what changes is that the process keeps its high-water mark of host memory instead of
giving freed pages back.

Only glibc (Linux) is asked; elsewhere nothing changes. The setting belongs to the process: the last call wins.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger("flwr.fedsuite")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -3, -4, -8  # mallopt parameters (malloc.h)
TRIM = 2**31 - 1  # free memory at the heap's top kept up to this (mallopt takes a C int)
# Requests above the mmap threshold get pages of their own. glibc 2.36 (this project's machines) accepts 1 GiB;
# versions that refuse anything above 32 MiB get M_MMAP_MAX = 0 instead (no request gets pages of its own).
KEEP = ({M_MMAP_THRESHOLD: 1 << 30}, {M_MMAP_MAX: 0})
# One arena: a thread other than the main one allocates from its own arena, whose pieces are at most 64 MiB, and
# gets fresh pages for anything larger whatever the thresholds; with one arena every thread uses the main heap.
ONE_ARENA = {M_ARENA_MAX: 1}
RETURN = {M_MMAP_THRESHOLD: 128 * 1024, M_TRIM_THRESHOLD: 128 * 1024, M_MMAP_MAX: 65536,
          M_ARENA_MAX: 8 * (os.cpu_count() or 1)}  # glibc's initial values  # fmt: skip

_lock = threading.Lock()
_state: bool | None = None  # None: this module has not asked glibc anything in this process
_warned = False


def _mallopt():
    """glibc's mallopt, or None where the C library is another one."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has it)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def _applied(mallopt, values: dict[int, int]) -> bool:
    return all(mallopt(param, value) == 1 for param, value in values.items())


def reuse_host_memory(on: bool) -> bool:
    """Keep freed large buffers for reuse (on) or give them back to the OS at once (off, glibc's initial values; a
    process where this was never turned on keeps glibc's own adaptive defaults). Returns whether the process now
    runs with the setting asked for; where glibc refuses (or the C library is another one) says so once, in one
    warning line, and returns False."""
    global _state, _warned
    on = bool(on)
    with _lock:
        if _state is on or (_state is None and not on):
            return True
        mallopt = _mallopt()
        if on:
            done = mallopt is not None and any(_applied(mallopt, way) for way in KEEP) and \
                _applied(mallopt, {M_TRIM_THRESHOLD: TRIM, **ONE_ARENA})  # fmt: skip
        else:
            done = mallopt is not None and _applied(mallopt, RETURN)
        _state = on if done else None
        if not done and not _warned:
            _warned = True
            log.warning("fedsuite │ reuse-host-memory=%s: not applied (%s); freed host buffers are handled as the C "
                        "library does by default", str(on).lower(),
                        "not glibc" if mallopt is None else "glibc refused a setting")  # fmt: skip
        return done
