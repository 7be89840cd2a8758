"""Passes over whole d-vectors (the server's aggregation, its reply checks) split into blocks of coordinates that a
few threads work on at once.

A round's aggregation reads every reply's d-vectors several times (the float64 copy and its finiteness check, the
cohort mean, the local-consistency figure): for 10 clients of an 11 M-parameter model that is seconds of one core's
memory traffic, while the machine has more cores and NumPy lets go of the GIL inside its loops. Every pass run here
is elementwise, or sums within each block and combines the blocks afterwards in a fixed order, so each coordinate
sees the same operations in the same order whatever the number of threads: the results are bit for bit those of
one thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
BLOCK = 1 << 16  # coordinates per block: a float64 block is 512 KiB, a few of them stay in a core's cache
MAX_THREADS = 8  # memory traffic stops scaling beyond a few cores

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def threads() -> int:
    """Threads for the blocks: the cores this process may use, at most MAX_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="fedsuite-blocks")
        return _pool


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist (and the lock may have been held by one of them): it makes
    its own lock, and its own pool when it needs one."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def spans(dim: int, block: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) of each block of `dim` coordinates, in order: blocks of `block`, by default about 4 per thread
    and no smaller than BLOCK (a task per small block would cost more to hand out than to run)."""
    if block is None:
        block = max(BLOCK, -(-dim // (4 * threads())))
    return [(start, min(start + block, dim)) for start in range(0, dim, block)]


def tasks(count: int) -> list[range]:
    """`range(count)` cut into about 4 runs per thread, in order (work items that are blocks already)."""
    size = max(1, -(-count // (4 * threads())))
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


def each(items: Sequence[T], work: Callable[[T], object]) -> list:
    """[work(item) for item in items], the items shared among the threads (inline for one item or one thread); an
    exception in any of them is raised here."""
    if len(items) <= 1 or threads() == 1:
        return [work(item) for item in items]
    return list(_executor().map(work, items))
