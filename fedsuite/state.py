"""Per-partition client state (SCAFFOLD c_i, FedDyn ∇L_i, FedSpeed ĝ_i, FedADMM λ_i …), ALGORITHMS.md §0.3.5.

A client's vectors are created lazily (zeros) on its first participation, loaded once per fit and written
back once after it. Two backends, chosen identically by every client from the run config:
- memory: the node's own Flower `Context.state` (kept per node by Flower; in simulation it travels with each
  message to whichever Ray actor runs it), used while the whole federation's state fits the budget;
- disk: one `.npz` file per partition under a state folder (written atomically), above the budget, or always
  with client-state='disk' (deployments that must survive a SuperNode restart point it at a node-local path).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
import torch

BYTES_PER_FLOAT = 4


def state_bytes(num_clients: int, dim: int, vectors: int) -> int:
    """N × d × vectors × 4 B: the whole federation's client state once every client has participated."""
    return num_clients * dim * vectors * BYTES_PER_FLOAT


def choose_backend(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float) -> str:
    if mode != "auto":
        return mode
    return "memory" if state_bytes(num_clients, dim, vectors) <= budget_mb * 2**20 else "disk"


def describe(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float) -> str:
    total = state_bytes(num_clients, dim, vectors)
    where = choose_backend(mode, num_clients, dim, vectors, budget_mb)
    return (
        f"client state: N={num_clients} × d={dim:,} × {vectors} vector(s) × 4 B = {total / 2**20:,.1f} MiB "
        f"→ {'in memory (Context.state)' if where == 'memory' else 'on disk, one file per partition'}"
    )


class DiskStore(MutableMapping):
    """Named arrays of one partition in `root/partition-<id>.npz`; the file is replaced atomically."""

    def __init__(self, root: Path, partition_id: int):
        self.path = Path(root) / f"partition-{partition_id:06d}.npz"
        self._arrays: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = dict(np.load(self.path)) if self.path.is_file() else {}
        return self._arrays

    def __getitem__(self, key):
        return self._load()[key]

    def __setitem__(self, key, value):
        self._load()[key] = value

    def __delitem__(self, key):
        del self._load()[key]

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())

    def flush(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **self._load())
        os.replace(tmp, self.path)


class ClientState:
    """One client's persistent d-vectors as tensors on the training device."""

    def __init__(self, store: MutableMapping, dim: int, device: torch.device | str = "cpu"):
        self.store, self.dim, self.device = store, dim, device
        self._tensors: dict[str, torch.Tensor] = {}

    def get(self, name: str) -> torch.Tensor:
        """The stored vector, or zeros on first use (ALGORITHMS.md: every client state starts at 0)."""
        if name not in self._tensors:
            if name in self.store:
                self._tensors[name] = torch.tensor(np.asarray(self.store[name]), device=self.device)
            else:
                self._tensors[name] = torch.zeros(self.dim, device=self.device)
        return self._tensors[name]

    def set(self, name: str, value: torch.Tensor) -> None:
        self._tensors[name] = value.detach().clone()

    def has(self, name: str) -> bool:
        return name in self._tensors or name in self.store

    def save(self) -> None:
        for name, tensor in self._tensors.items():
            self.store[name] = tensor.detach().cpu().numpy()
        if isinstance(self.store, DiskStore):
            self.store.flush()
