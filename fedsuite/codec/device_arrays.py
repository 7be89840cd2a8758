"""A reply's arrays kept on the training device, for the one engine where reply and server share a process
(the in-process batched round, docs/running/batched.md#replies-on-the-device).

Elsewhere a client's uplink is brought to the host and encoded as `.npy` bytes (fedsuite/server/wire.py), and the
server decodes and widens each array to float64 before the rule averages them: on a GPU that is one device-to-host
copy and two host copies per client and vector, every round. When nothing has to travel over a wire, the reply can
carry the tensors themselves:

- `DeviceParameters` (fedsuite/codec/device_parameters.py): Flower's `Parameters` with no bytes and the uplink's
  float32 tensors beside them, so every Flower and fedsuite function that passes a FitRes along passes it unchanged;
- `DeviceArrays`: a valid reply's arrays as the server rule reads them (`Reply.arrays`): a mapping whose values are
  float64 numpy arrays, made from the device tensor only when a rule asks for one (and kept), while the cohort means
  (fedsuite/rules/server_rule.py) and the round's figures (fedsuite/server/accounting.py) read `tensor(name)` and are
  computed on the device. A rule that reads a vector itself gets exactly the array the host path would give it.
This module holds no Flower type, so the server rules (Flower-free) can read it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping

import numpy as np
import torch


def uplink_tensor(value: torch.Tensor) -> torch.Tensor:
    """An uplink vector as it travels on the device: a flat float32 copy (the float32 array `pack` would encode; a
    copy, as the host path's: the vector may be a buffer the next client's round writes into)."""
    return value.detach().reshape(-1).to(torch.float32, copy=True)


DEVICE_FLOOR = 0.2  # a reply stays on a CUDA card only while this share of the card's memory stays free after it


def room_for(tensors) -> bool:
    """Whether an uplink's `tensors` may stay on their device until the round is aggregated: always off a CUDA card;
    on one while DEVICE_FLOOR of its memory stays free after them (a large cohort's replies would otherwise crowd
    out the training of its last chunks: those replies go to the host, as any reply elsewhere)."""
    tensors = list(tensors)
    if not tensors or tensors[0].device.type != "cuda":
        return True
    free, total = torch.cuda.mem_get_info(tensors[0].device)
    return leaves_floor(free, total, sum(4 * t.numel() for t in tensors))


def leaves_floor(free: int, total: int, need: int) -> bool:
    """Whether `need` bytes taken from `free` leave DEVICE_FLOOR of `total`."""
    return free - need >= DEVICE_FLOOR * total


class DeviceArrays(MutableMapping):
    """A valid reply's float32 device tensors by name; `self[name]` is the float64 numpy copy the host path makes
    (made on first use and kept), or, for a server rule whose own vectors are on the device (`wide_on_device`,
    fedsuite/rules/vectors.py), a float64 copy made there at each read; `tensor(name)` the tensor itself. A value a
    stage sets is a host array from then on: that name is no longer on the device (`on_device`)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], wide_on_device: bool = False):
        self._tensors = dict(tensors)
        self._wide: dict[str, np.ndarray | torch.Tensor] = {}
        self._names = dict.fromkeys(self._tensors)  # every name, in order
        self.wide_on_device = wide_on_device

    def tensor(self, name: str) -> torch.Tensor:
        return self._tensors[name]

    def on_device(self, name: str) -> bool:
        return name in self._tensors

    def __getitem__(self, name: str) -> np.ndarray | torch.Tensor:
        if name in self._wide:
            return self._wide[name]
        tensor = self._tensors[name]  # widened as the host path widens
        if self.wide_on_device:  # made anew at each read, never kept: the card holds no float64 copy of a reply
            return tensor.to(torch.float64, copy=True)
        self._wide[name] = tensor.cpu().numpy().astype(np.float64)
        return self._wide[name]

    def __setitem__(self, name: str, value) -> None:
        self._tensors.pop(name, None)
        self._wide[name] = value
        self._names[name] = None

    def __delitem__(self, name: str) -> None:
        del self._names[name]
        self._tensors.pop(name, None)
        self._wide.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name) -> bool:
        return name in self._names


def all_on_device(arrays: list, name: str) -> bool:
    """Whether every reply's arrays (a list of Reply.arrays) hold `name` as a tensor, all on one device."""
    if not arrays or not all(isinstance(a, DeviceArrays) and a.on_device(name) for a in arrays):
        return False
    return len({a.tensor(name).device for a in arrays}) == 1
