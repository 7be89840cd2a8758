"""Large host buffers kept in the process for reuse (run-config key reuse-host-memory;
docs/performance.md#host-memory-freed-buffers-kept-for-reuse).

A round allocates and frees buffers the size of the model many times: each client's copy of the downlink, the
bytes of its reply, the rule's temporaries, the server's copies. glibc's allocator serves every request above its
mmap threshold (128 KiB, raised with use to at most 32 MiB) with fresh pages from the kernel and returns them when
the buffer is freed, so a buffer of 45 MB (a model of 11 M floats) costs 11 000 zero-filled page faults each time
it is allocated, and a round of 10 such clients hundreds of thousands. With a mmap threshold above the model's
size and a high trim threshold, freed buffers stay in the process's heap and the next allocation reuses them.
Nothing computed changes; what changes is that the process keeps its high-water mark of host memory instead of
giving freed pages back.

Only glibc (Linux) is asked; elsewhere nothing changes. The setting belongs to the process: the last call wins.
"""

from __future__ import annotations

import ctypes
import threading

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
KEEP = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: 2**31 - 1}  # requests above 1 GiB still get their own pages
RETURN = {M_MMAP_THRESHOLD: 128 * 1024, M_TRIM_THRESHOLD: 128 * 1024}  # glibc's initial values

_lock = threading.Lock()
_state: bool | None = None  # None: this module has not asked glibc anything in this process


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


def reuse_host_memory(on: bool) -> bool:
    """Keep freed large buffers for reuse (on) or give them back to the OS at once (off, glibc's initial values; a
    process where this was never turned on keeps glibc's own adaptive defaults). Returns whether the process now
    runs with the setting asked for: False where the C library is not glibc or refused a value."""
    global _state
    with _lock:
        if _state is on or (_state is None and not on):
            return True
        mallopt = _mallopt()
        if mallopt is None:
            return False
        values = KEEP if on else RETURN
        if not all(mallopt(param, value) == 1 for param, value in values.items()):
            return False
        _state = on
        return True


def reusing() -> bool:
    """Whether this module turned reuse on in this process (and it is still on)."""
    return bool(_state)
