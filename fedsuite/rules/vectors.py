"""Where a server rule's d-vectors live, and the few operations a rule needs beyond +, −, × and ÷ on them
(docs/running/batched.md#the-server-rule-on-the-device).

A rule's x, its declared state and the vectors it reads from replies are NumPy arrays on the host (`HOST`), or, in
the in-process batched round on a CUDA card, torch tensors on that card (`OnDevice`): the rule's own arithmetic then
never leaves the card. A rule written with the operators and with `self.vectors` runs unchanged on either:

    self.vectors.zeros(dim)            a float64 zero vector (`zeros(dim, "float32")`: a float32 one)
    self.vectors.wide(v)               a float64 copy,  `narrow(v)`: a float32 copy,  `copy(v)`: a copy
    self.vectors.sqrt(v), sign(v)      elementwise
    self.vectors.dot(a, b), norm(v)    Python floats, summed in float64

On the device every elementwise operation rounds as NumPy's does; a sum over coordinates (`dot`, `norm`) is added up
in another order, so it equals the host's to float64 rounding only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class HostVectors:
    """NumPy arrays on the host: every rule's vectors unless the run places them on its device."""

    on_device = False

    def zeros(self, dim: int, dtype: str = "float64") -> np.ndarray:
        return np.zeros(dim, dtype)

    def wide(self, v) -> np.ndarray:
        return np.array(v, np.float64)

    def narrow(self, v) -> np.ndarray:
        return np.array(v, np.float32)

    def copy(self, v) -> np.ndarray:
        return np.array(v, copy=True)

    def sqrt(self, v) -> np.ndarray:
        return np.sqrt(v)

    def sign(self, v) -> np.ndarray:
        return np.sign(v)

    def dot(self, a, b) -> float:
        return float(np.dot(np.asarray(a, np.float64), np.asarray(b, np.float64)))

    def norm(self, v) -> float:
        return float(np.linalg.norm(np.asarray(v, np.float64)))

    def held(self, value: Any) -> Any:
        """`value` (a vector, or a table, history or list of them) as this placement holds it."""
        return map_vectors(value, host_array)


class OnDevice(HostVectors):
    """torch tensors on one device (the same dtypes: float32 x, float64 state)."""

    on_device = True

    def __init__(self, device: torch.device):
        self.device = torch.device(device)

    def zeros(self, dim: int, dtype: str = "float64") -> torch.Tensor:
        return torch.zeros(dim, dtype=getattr(torch, dtype), device=self.device)

    def wide(self, v) -> torch.Tensor:
        return v.to(torch.float64, copy=True)

    def narrow(self, v) -> torch.Tensor:
        return v.to(torch.float32, copy=True)

    def copy(self, v) -> torch.Tensor:
        return v.clone()

    def sqrt(self, v) -> torch.Tensor:
        return torch.sqrt(v)

    def sign(self, v) -> torch.Tensor:
        return torch.sign(v)

    def dot(self, a, b) -> float:
        return float(torch.dot(a.to(torch.float64), b.to(torch.float64)))

    def norm(self, v) -> float:
        return float(torch.linalg.vector_norm(v.to(torch.float64)))

    def held(self, value: Any) -> Any:
        return map_vectors(value, self.tensor)

    def tensor(self, v) -> torch.Tensor:
        """A host array's (or a tensor's) values as a tensor of its dtype on the device, never sharing its memory."""
        if isinstance(v, torch.Tensor):
            return v.to(self.device, copy=True)
        return torch.from_numpy(np.array(v, copy=True)).to(self.device)


HOST = HostVectors()


def host_array(v: Any) -> Any:
    """A tensor's values as a NumPy array of its own on the host (anything else as it is)."""
    if not isinstance(v, torch.Tensor):
        return v
    value = v.detach()
    return value.numpy().copy() if value.device.type == "cpu" else value.cpu().numpy()


def map_vectors(value: Any, move: Callable[[Any], Any]) -> Any:
    """`value` with `move` applied to every vector in it: a vector itself, or the values of a dict (a Table), the
    entries of a deque (a History, its length kept), a list or a tuple; numbers and None as they are."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return move(value)
    if isinstance(value, dict):
        return {k: map_vectors(v, move) for k, v in value.items()}
    if isinstance(value, deque):
        return deque((map_vectors(v, move) for v in value), maxlen=value.maxlen)
    if isinstance(value, (list, tuple)):
        return type(value)(map_vectors(v, move) for v in value)
    return value
