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

from collections.abc import Iterator, Mapping

import numpy as np
import torch


def uplink_tensor(value: torch.Tensor) -> torch.Tensor:
    """An uplink vector as it travels on the device: a flat float32 copy (the float32 array `pack` would encode; a
    copy, as the host path's: the vector may be a buffer the next client's round writes into)."""
    return value.detach().reshape(-1).to(torch.float32, copy=True)


class DeviceArrays(Mapping):
    """A valid reply's float32 device tensors by name; `self[name]` is the float64 numpy copy the host path makes
    (made on first use and kept), `tensor(name)` the tensor itself."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        self._tensors = dict(tensors)
        self._host: dict[str, np.ndarray] = {}

    def tensor(self, name: str) -> torch.Tensor:
        return self._tensors[name]

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._host:
            self._host[name] = self._tensors[name].cpu().numpy().astype(np.float64)  # as the host path widens
        return self._host[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name) -> bool:
        return name in self._tensors


def all_on_device(arrays: list) -> bool:
    """Whether every reply's arrays (a list of Reply.arrays) are DeviceArrays, on one device."""
    if not arrays or not all(isinstance(a, DeviceArrays) for a in arrays):
        return False
    devices = {t.device for a in arrays for t in a._tensors.values()}
    return len(devices) <= 1
