"""The in-process batched round's replies left on the device (docs/running/batched.md#replies-on-the-device).

In process, a batched client's reply goes straight to the server's strategy in the same process; nothing travels
over a wire. So where the clients train on a CUDA card, each client's uplink stays there as float32 tensors
(`RuleClient.finish` with `keeps_uplink_on_device`, while the card keeps room: fedsuite/codec/device_arrays.py), the
reply carries them in a DeviceParameters (fedsuite/codec/device_parameters.py), the server checks them there
(DeviceArrays, fedsuite/codec/device_arrays.py), and the cohort means and the round's figures are
formed there in float64 (fedsuite/rules/server_rule.py, fedsuite/server/accounting.py). What a rule still reads
vector by vector is brought to the host when it reads it, as the same float64 array the host path gives.

A client whose run has client stages (compressed, privatised or securely summed uploads, the model's buffers,
relaxed initialisation) keeps the host path: those stages handle the upload's arrays themselves. Off a CUDA card
nothing changes unless `ON_CPU` is set, which tests do to run this very path on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from flwr.common import Code, FitRes, Status

from fedsuite.codec.device_parameters import DeviceParameters, device_tensors
from fedsuite.node.client import RuleClient
from fedsuite.stages.client import handles_upload

ON_CPU = False  # keep the replies as tensors when the clients train on the CPU too (the tests of this path)


def keeps_on_device(client: RuleClient) -> bool:
    """Whether `client`'s uplink may stay on its device: no client stage handles it (handles_upload), and the device
    is a CUDA card (or ON_CPU)."""
    quiet = not any(handles_upload(stage) for stage in client.stages)
    return quiet and (client.node.device.type == "cuda" or ON_CPU)


def building(build: Callable[[], RuleClient] | None) -> Callable[[], RuleClient] | None:
    """`build` (a Member's) whose client leaves its uplink on the device where `keeps_on_device` allows."""
    if build is None:
        return None

    def build_keeping() -> RuleClient:
        client = build()
        client.keeps_uplink_on_device = keeps_on_device(client)
        return client

    return build_keeping


def as_fit_res(reply):
    """A dispatcher reply whose arrays are tensors as a FitRes carrying them (DeviceParameters); any other reply as
    it is."""
    if isinstance(reply, tuple) and reply[0] and isinstance(reply[0][0], torch.Tensor):
        arrays, examples, metrics = reply
        return FitRes(Status(Code.OK, "Success"), DeviceParameters.of(arrays), examples, metrics)
    return reply


def one_device(replies: list) -> torch.device | None:
    """The device every reply that carries arrays holds them on as tensors (DeviceParameters), or None: some reply
    holds host arrays, the devices differ, or no reply carries any."""
    devices = set()
    for reply in replies:
        if isinstance(reply, FitRes):
            tensors = device_tensors(reply.parameters)
            if tensors is None:
                if reply.parameters.tensors:
                    return None
                continue
            devices |= {t.device for t in tensors}
        elif isinstance(reply, tuple) and reply[0]:  # host arrays the dispatcher trained but did not keep
            return None
    return devices.pop() if len(devices) == 1 else None
