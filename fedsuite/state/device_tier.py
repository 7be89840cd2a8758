"""The `device` tier: client state kept as tensors on the training device, for an engine that runs the whole
federation in one process (docs/running/scale.md#tiers).

It is the memory tier (fedsuite.state.memory_tier) with one difference: a vector the client saves as a tensor stays a
tensor, on the device it was trained on, instead of being brought to the host as a numpy array. So a round of a
stateful algorithm (SCAFFOLD's c_i, FedDyn's duals, FedSpeed's ĝ_i, the Adam moments, LoSAC's tables) moves no client
state between host and device: its client reads the tensor (a copy on the device, `ClientState.get`), trains, and
saves the new one, which the flush copies on the device (so no tensor on the shelf is anyone else's).

The rules of the memory tier hold unchanged: a flush puts the partition's new set on the shelf with one assignment
(a failure while it copies leaves the last flush's state), a flushed value is never copied again (the previous
vectors of a write are the shelf's own tensors), and what a store reads after a flush is what the flush stored.
Tensors cannot be made read-only as numpy arrays are; the tier keeps them safe by never handing one out to be
changed: `ClientState` copies what it reads, and the flush copies a tensor it did not make. Small numpy entries (the
round of an unconfirmed write, markers) stay numpy arrays, as in the memory tier.

The plan chooses this tier (fedsuite.state.plan.StatePlan.tier) for a federation in one process whose state fits its
share of the device's memory, or when client-state='device' asks for it; the host memory tier and the files tier are
behind it for state that does not fit.
"""

from __future__ import annotations

import torch

from fedsuite.state import memory_tier
from fedsuite.state.memory_tier import MemoryTier


def frozen_tensor(name: str, value: torch.Tensor) -> torch.Tensor:
    """A copy of `value` (client state `name`) on its own device, detached and contiguous (every torch dtype is
    numeric, as the kinds a state file stores)."""
    return value.detach().clone(memory_format=torch.contiguous_format)


class DeviceTier(MemoryTier):
    """One partition's named tensors (and small numpy entries) on its run's shelf, in the process that trains it
    (module docstring)."""

    name = "device"
    holds_tensors = True  # ClientState saves tensors here as they are (fedsuite.state.client_state)

    def _frozen(self, key: str, value):
        if isinstance(value, torch.Tensor):
            return frozen_tensor(key, value)
        return memory_tier.frozen_copy(key, value)
