"""Shared test fixtures: a small heterogeneous least-squares federation and an independent numpy reference."""

from __future__ import annotations

import numpy as np

from fedsuite.config import resolve
from fedsuite.data import load_dataset

LSQ = {
    "dataset": "synthetic-lsq",
    "num-clients": 5,
    "clients-per-round": 5,
    "synthetic-dim": 8,
    "synthetic-samples": 20,
    "synthetic-heterogeneity": 1.0,
    "batch-size": 0,
    "lr": 0.02,
    "local-steps": 1,
    "num-server-rounds": 10,
    "eval-every": 1000,
}


def lsq_clients(run_config: dict) -> tuple[list[tuple[np.ndarray, np.ndarray]], float]:
    """(A_i, b_i) per client in float64 and the weight decay, straight from the generator."""
    cfg = resolve(run_config)
    fed = load_dataset(cfg)
    return [(fed.features_x[p], fed.targets[p]) for p in fed.client_parts], float(cfg["weight-decay"])


def local_gd(a: np.ndarray, b: np.ndarray, x0: np.ndarray, lr: float, steps: int, wd: float, mu: float = 0.0):
    """K full-batch steps of x ← x − η(∇F_i(x) + μ(x − x0) + wd·x), F_i = (1/2n)‖Ax − b‖²."""
    x = x0.copy()
    for _ in range(steps):
        grad = a.T @ (a @ x - b) / len(b)
        x = x - lr * (grad + mu * (x - x0) + wd * x)
    return x


def launched_here() -> set[int]:
    """Tagged launch processes (simulation.processes) started from this checkout: their inherited PWD is ours.
    Other sessions sharing the machine (another worktree's tests, a deployment demo) have their own."""
    import os
    from pathlib import Path

    from simulation.processes import tagged_processes

    mine = f"PWD={os.environ.get('PWD', os.getcwd())}".encode()
    found = set()
    for pid in tagged_processes():
        try:
            if mine in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.add(pid)
        except OSError:
            pass
    return found
