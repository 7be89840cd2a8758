"""How large a federation's client state is, whether it fits where it will live, and which backend it gets
(docs/running/scale.md#where-client-state-lives).

The estimate is N × (d × vectors + extra) × 4 B × 2 copies: every client's vectors once it has participated, and the
previous ones, kept until the server confirms the reply that replaced them (fedsuite.state.tier). `choose_backend`
puts the state in memory while the estimate fits the budget (client-state='auto'), else on disk; `capacity_check`
compares the estimate with the room where it will go, for the launcher's preflight and the ServerApp.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedsuite.state.folders import SHARED_MEMORY, state_folder

BYTES_PER_FLOAT = 4
COPIES = 2  # the vectors, and the previous ones until the server confirms the reply that replaced them
WARN_FRACTION = 0.8  # an estimate above this share of the room left is worth a warning


def state_bytes(num_clients: int, dim: int, vectors: int, extra: int = 0) -> int:
    """N × (d × vectors + extra) × 4 B × 2 copies: the whole federation's client state once every client has
    participated (`extra`: floats per client beside the d-vectors, such as the model's own buffers)."""
    return num_clients * (dim * vectors + extra) * BYTES_PER_FLOAT * COPIES


def choose_backend(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float, extra: int = 0) -> str:
    if mode != "auto":
        return mode
    return "memory" if state_bytes(num_clients, dim, vectors, extra) <= budget_mb * 2**20 else "disk"


def describe(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float, extra: int = 0) -> str:
    total = state_bytes(num_clients, dim, vectors, extra)
    where = choose_backend(mode, num_clients, dim, vectors, budget_mb, extra)
    size = f"d={dim:,} × {vectors} vector(s)" + (f" + {extra:,} buffer floats" if extra else "")
    size = size if not extra or vectors else f"{extra:,} buffer floats"
    return (
        f"client state: N={num_clients} × {size} × 4 B × {COPIES} (current + last "
        f"confirmed) = {total / 2**20:,.1f} MiB "
        f"→ {'in memory (' + str(SHARED_MEMORY) + ')' if where == 'memory' else 'on disk'}, one file per partition"
    )


def free_bytes(folder: Path) -> int:
    """Bytes free to an unprivileged writer in the file system that holds `folder` (or would: its nearest
    existing parent)."""
    folder = Path(folder).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def memory_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def room(where: str, folder: Path) -> tuple[int, str]:
    """The bytes client state can take in `folder` and what limits them: the free space of its file system, and
    for memory state also the RAM available (a RAM folder's pages are memory; /dev/shm's size may exceed it)."""
    free = free_bytes(folder)
    what = f"{folder} has {free / 2**20:,.0f} MiB free"
    if where == "memory":
        ram = memory_available()
        if ram is not None and ram < free:
            return ram, f"RAM has {ram / 2**20:,.0f} MiB available ({folder} {free / 2**20:,.0f} MiB free)"
        if ram is not None:
            what += f" (RAM {ram / 2**20:,.0f} MiB available)"
    return free, what


def capacity_check(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float,
                   configured: str = "", extra: int = 0) -> tuple[str, str] | None:  # fmt: skip
    """Compare the client-state estimate with the room where it will live: ("error", line) when it does not fit,
    ("warning", line) above WARN_FRACTION of the room, else None. Each line names the numbers and the way out."""
    total = state_bytes(num_clients, dim, vectors, extra)
    if not total:
        return None
    where = choose_backend(mode, num_clients, dim, vectors, budget_mb, extra)
    folder = state_folder(where, configured)
    space, what = room(where, folder)
    fits = max(0, int(space // max(1, state_bytes(1, dim, vectors, extra))))
    size = f"(d={dim:,} × {vectors} + {extra:,})" if extra else f"d={dim:,} × {vectors}"
    need = f"client state needs {total / 2**20:,.0f} MiB (N={num_clients} × {size} × 4 B × {COPIES})"
    if where == "memory":
        out = ("use client-state='disk' with client-state-dir=<a folder with room>, or fewer clients "
               f"(num-clients ≤ {fits:,} fit)")  # fmt: skip
        label = "in memory" if mode == "memory" else f"in memory (client-state='auto', under {budget_mb:g} MiB)"
    else:
        out = f"choose a client-state-dir with room, or fewer clients (num-clients ≤ {fits:,} fit)"
        label = f"on disk in {folder}"
    if total > space:
        return "error", f"{need} {label}, but {what}: it does not fit; {out}"
    if total > WARN_FRACTION * space:
        return "warning", f"{need} {label}: {total / max(space, 1):.0%} of the room ({what}); {out}"
    return None
