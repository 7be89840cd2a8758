"""Device choice: CUDA when asked for or (auto) when visible, else CPU; a tensor's values brought to the host; a
read-only host array moved to a device once for all the clients of a batched call that receive it."""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import torch

_pinned: defaultdict[tuple, list[torch.Tensor]] = defaultdict(list)  # to_host's free buffers
_moved: ContextVar[dict | None] = ContextVar("fedsuite_moved_arrays", default=None)


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError(
                "device='cuda' but no CUDA device is visible in this process; in simulation give clients a GPU "
                "share with --federation-config 'client-resources-num-gpus=0.25', or use device='auto'"
            )
        return torch.device("cuda")
    return torch.device("cpu")


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a NumPy array on the host, for an array that is encoded and let go soon after (an
    uplink). From a CUDA device the copy goes through page-locked memory: one DMA at full speed into memory that is
    mapped already, where a fresh pageable array would first fault in every page. The page-locked buffers are this
    process's own (`_pinned`), kept across rounds: pinning a model-sized buffer anew costs tens of milliseconds. The
    array holds its buffer until it is let go, with every view of it (one client at a time: once its reply is
    encoded; batched: a round's uplinks together until the round's replies are collected); the buffer then waits for
    the next array of its shape and dtype."""
    value = tensor.detach()
    if value.device.type != "cuda":
        return value.cpu().numpy()
    key = (tuple(value.shape), value.dtype)
    free = _pinned[key]
    try:
        host = free.pop()
    except IndexError:
        host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    host.copy_(value)
    array = host.numpy()
    weakref.finalize(array, free.append, host)  # after the array and all its views are gone
    return array


@contextmanager
def one_move_per_array() -> Iterator[None]:
    """Within the block, `to_device` moves each read-only host array to the device once: the batched dispatcher
    prepares a round's clients inside it, whose downlinks are views of the same message bytes (the server's model,
    the same for every client), so one host-to-device copy serves them all. The arrays it has seen must stay alive
    and unchanged until the block ends (read-only views of messages the dispatcher holds)."""
    token = _moved.set({})
    try:
        yield
    finally:
        _moved.reset(token)


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array's values as a new tensor on `device` that the caller may write (never over the array's memory).
    Inside `one_move_per_array` an array already moved (the same memory, shape, strides and dtype) is copied on the
    device from its first move instead of being moved again: the same values, bit for bit."""
    moved = _moved.get()
    if moved is None:
        return _moved_once(array, device)
    key = (array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str, str(device))
    first = moved.get(key)
    if first is None:
        first = moved[key] = _moved_once(array, device)  # kept unwritten: each caller gets a copy
    return first.clone()


def _moved_once(array: np.ndarray, device: torch.device) -> torch.Tensor:
    device = torch.device(device)
    return torch.from_numpy(array.copy() if device.type == "cpu" else array).to(device)
