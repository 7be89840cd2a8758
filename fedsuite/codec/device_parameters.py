"""`DeviceParameters`: a reply's arrays as float32 tensors on the training device inside Flower's `Parameters`, for
the in-process batched round (fedsuite/codec/device_arrays.py, docs/running/batched.md#replies-on-the-device)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from flwr.common import Parameters

DEVICE_TENSOR_TYPE = "fedsuite.device-tensors"  # a DeviceParameters' tensor_type: no bytes, tensors beside


@dataclass
class DeviceParameters(Parameters):
    """`Parameters` whose arrays are float32 tensors on a device (`arrays`), never encoded (module docstring)."""

    arrays: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def of(cls, tensors: list[torch.Tensor]) -> DeviceParameters:
        return cls(tensors=[], tensor_type=DEVICE_TENSOR_TYPE, arrays=list(tensors))


def device_tensors(parameters: Parameters) -> list[torch.Tensor] | None:
    """The tensors of a DeviceParameters, or None for encoded parameters."""
    return parameters.arrays if isinstance(parameters, DeviceParameters) else None
