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

from fedsuite.codec.device_arrays import DEVICE_FLOOR, DeviceArrays, leaves_floor
from fedsuite.codec.device_parameters import DeviceParameters
from fedsuite.codec.payload import names_of, pack
from fedsuite.rules.declared import History, Table, Vector
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
        # a reply that came to the host (a client trained alone, or the card was short of room): its arrays moved to
        # the device as the float32 they travelled as (their float64 copies are widened float32, so nothing is lost)
        tensors = {name: self.vectors.tensor(np.asarray(value, np.float32)) for name, value in arrays.items()}
        return replace(reply, arrays=DeviceArrays(tensors, wide_on_device=True))

    def _wire(self, value) -> torch.Tensor:
        """A flat tensor on the device, the message's own, of the dtype `pack` gives it: float32, or uint8 for bytes."""
        tensor = value if isinstance(value, torch.Tensor) else self.vectors.tensor(np.asarray(value))
        dtype = torch.uint8 if tensor.dtype == torch.uint8 else torch.float32
        return tensor.detach().reshape(-1).to(self.vectors.device, dtype, copy=True)


def placeable(strategy: Any) -> str | None:
    """Why `strategy`'s rule must stay on the host, or None: a round stage that handles the run's arrays does so as
    host arrays (ServerStage.handles_vectors), so does an observer that watches them (fedsuite/server/observers.py),
    a rule's query exchange reads x there, and a
    rule class that does not say `runs_on_device = True` in its own body may use NumPy on its vectors (a plug-in's
    rule, or a subclass of a built-in one that overrides its arithmetic)."""
    rule = strategy.rule
    if handling := [type(stage).__name__ for stage in strategy.stages if stage.handles_vectors]:
        return f"round stage {handling[0]} handles the round's arrays as host arrays"
    if watching := [type(o).__name__ for o in strategy.observers if watches_vectors(o)]:
        return f"observer {watching[0]} reads the round's vectors as host arrays"
    if rule.query is not None:
        return "the rule asks the clients a query before training"
    if not type(rule).__dict__.get("runs_on_device", False):
        return f"{type(rule).__name__} does not say runs_on_device = True"
    return None


def state_bytes(rule: Any) -> int:
    """The bytes of the rule's x and declared d-vectors at their largest: a Table counted with an entry for every
    partition (it grows as partitions first reply), a History at its full length."""
    total = rule.dim * 4  # x, float32
    for spec in rule.state_specs():
        if isinstance(spec, (Vector, Table, History)):
            entries = rule.num_clients if isinstance(spec, Table) else spec.units
            total += entries * rule.dim * np.dtype(spec.dtype).itemsize
    return total


def too_large(rule: Any, device: torch.device) -> str | None:
    """Why the rule's state may not go to `device` for its size, or None. On a CUDA card it goes only while the card
    keeps DEVICE_FLOOR of its memory free after it, by the rule the replies stay by (fedsuite/codec/device_arrays.py),
    read when it moves: the kept steps, the client state and the round's replies are on the card by then, and the
    state is counted at its largest (`state_bytes`), as a table grows."""
    if device.type != "cuda":
        return None
    need = state_bytes(rule)
    free, total = torch.cuda.mem_get_info(device)
    return None if leaves_floor(free, total, need) else (
        f"its state at its largest ({need / 2**30:.1f} GiB, a table counted with every partition) would leave less "
        f"than {DEVICE_FLOOR:.0%} of the card free")  # fmt: skip


def allowed_on(device: torch.device) -> bool:
    """Whether a rule is placed on `device`: a CUDA card, or any device under ON_CPU."""
    return device.type == "cuda" or ON_CPU
