"""Where the strategy keeps a run's vectors (docs/running/batched.md#the-server-rule-on-the-device).

`HostPlacement`, every run's at first: the rule's x and state are NumPy arrays, a message's arrays are encoded as
`.npy` bytes (fedsuite/server/wire.py), and a reply's arrays are float64 host arrays or, where a reply kept them on
the device, read from there (fedsuite/codec/device_arrays.py).

`DevicePlacement`: in the in-process batched round, once a round's replies all arrived as tensors on one device
(fedsuite/batched/server.py), the strategy moves the rule there (`ServerRule.place`, fedsuite/rules/vectors.py) for
the rest of the run, if the rule allows it (`placeable`). From then on the rule's arithmetic runs on the device,
every reply's vectors are read there as float64 tensors, and the fit instructions carry the model and the rule's
downlink as float32 tensors (DeviceParameters, as the replies do): in a round nothing goes to the host but the
round's figures. What leaves the process (a checkpoint, an evaluation, a result, an observer's `strategy.x`) is
brought to the host when it is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from flwr.common import Parameters

from fedsuite.codec.device_arrays import DeviceArrays
from fedsuite.codec.device_parameters import DeviceParameters
from fedsuite.codec.payload import names_of, pack
from fedsuite.rules.rounds import Reply
from fedsuite.rules.vectors import OnDevice, host_array
from fedsuite.server.observers import watches_vectors
from fedsuite.server.wire import to_parameters

ON_CPU = False  # place the rule on the CPU's "device" too (the tests of this path; on a CUDA card it is on by itself)


class HostPlacement:
    """Vectors on the host, messages encoded (the module docstring)."""

    on_device = False

    def parameters(self, arrays: Sequence) -> Parameters:
        """A message's packed arrays (`pack`; or the float32 model itself) as its Parameters."""
        return to_parameters(arrays)

    def pack(self, named: Mapping[str, Any]) -> tuple[list, str]:
        """Named vectors as a message's arrays and their names (fedsuite.codec.payload)."""
        return pack(named)

    def host(self, value: Any) -> Any:
        """A vector the rule holds, as a host array."""
        return value

    def reply(self, reply: Reply) -> Reply:
        """A validated reply as the rule reads it."""
        return reply


class DevicePlacement(HostPlacement):
    """The rule's vectors, the downlink and the replies' vectors on one device (the module docstring)."""

    on_device = True

    def __init__(self, vectors: OnDevice):
        self.vectors = vectors

    def parameters(self, arrays: Sequence) -> Parameters:
        return DeviceParameters.of(list(arrays))

    def pack(self, named: Mapping[str, Any]) -> tuple[list, str]:
        return [self._wire(v) for v in named.values()], names_of(named)

    def host(self, value: Any) -> Any:
        return host_array(value)

    def reply(self, reply: Reply) -> Reply:
        arrays = reply.arrays
        if isinstance(arrays, DeviceArrays) and all(arrays.on_device(name) for name in arrays):
            arrays.wide_on_device = True
            return reply
        # a reply that came to the host (a client trained alone, or the card was short of room): its float64
        # arrays moved to the device, widened already
        tensors = {name: self.vectors.tensor(np.asarray(value, np.float64)) for name, value in arrays.items()}
        return replace(reply, arrays=DeviceArrays(tensors, wide_on_device=True))

    def _wire(self, value) -> torch.Tensor:
        """A flat float32 tensor on the device, the message's own (as `pack` makes a float32 copy to encode)."""
        tensor = value if isinstance(value, torch.Tensor) else self.vectors.tensor(np.asarray(value))
        return tensor.detach().reshape(-1).to(self.vectors.device, torch.float32, copy=True)


def placeable(strategy: Any) -> str | None:
    """Why `strategy`'s rule must stay on the host, or None: round stages handle the run's arrays as host arrays, so
    does an observer that watches them (fedsuite/server/observers.py), a rule's query exchange reads x there, and a
    rule class that does not say `runs_on_device = True` in its own body may use NumPy on its vectors (a plug-in's
    rule, or a subclass of a built-in one that overrides its arithmetic)."""
    rule = strategy.rule
    if strategy.stages:
        return "the run has round stages"
    if watching := [type(o).__name__ for o in strategy.observers if watches_vectors(o)]:
        return f"observer {watching[0]} reads the round's vectors as host arrays"
    if rule.query is not None:
        return "the rule asks the clients a query before training"
    if not type(rule).__dict__.get("runs_on_device", False):
        return f"{type(rule).__name__} does not say runs_on_device = True"
    return None


def allowed_on(device: torch.device) -> bool:
    """Whether a rule is placed on `device`: a CUDA card, or any device under ON_CPU."""
    return device.type == "cuda" or ON_CPU
