"""One interface for every place client state can live: `StateTier`, and the accepted-round rule all tiers share.

A tier holds one partition's named arrays (a MutableMapping of name → numpy array) and adds what the client adapter
and the batched engine need beyond a dict (fedsuite/node/client.py, fedsuite/batched/dispatch.py; both reach a tier
only through fedsuite.state.client_state.ClientState):

- `flush()`: make every change durable at once; a failure at any point leaves the state the last flush left;
- `keep_previous(name, key)`: make `key` the previous value of `name` without copying it, where the tier can
  (the file tier links to the file that holds it); False where it cannot (the caller copies);
- `check_owner` / `claim` (class methods): a place holds one run's state only (docs/running/scale.md).

The tiers that exist are listed in fedsuite.state.plan.TIERS and chosen there, from the run's StatePlan:
`files` (fedsuite.state.file_tier: one file per partition, in a RAM folder or on disk), `memory`
(fedsuite.state.memory_tier: arrays kept in the process, for an engine that runs the whole federation in it) and
`device` (fedsuite.state.device_tier: the memory tier whose saved tensors stay on the training device,
`holds_tensors`). The adapters and the engine are the same for every tier (docs/running/scale.md#tiers).

No client ahead of the server (`settle`): a fit writes its new vectors at once but keeps the ones they replace
(`prev:` entries, tagged with the round of the write). The server tells each client, in its next fit message, the
last round in which it accepted that client's reply; if that is not the round of the write, the reply was rejected
or lost, and the client restores the previous vectors before it trains. The rule is written once, here, over the
MutableMapping interface, so every tier gives the same `effective` state for the same operations.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import MutableMapping
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

PREVIOUS = "prev:"  # key prefix of the previous vectors
ABSENT = "absent:"  # key prefix marking a vector that did not exist before the unconfirmed write
WRITE_ROUND = "write-round"  # the round of the unconfirmed write


class StateTier(MutableMapping):
    """One partition's client state in one tier (module docstring). A tier is built as
    `Tier(root, partition_id, owner_key)`: `root` names the run's place (a folder; a memory tier's key), and
    `owner_key` (the run's state key) is recorded as the place's owner before its first write."""

    name: ClassVar[str]  # the tier's name in fedsuite.state.plan.TIERS
    holds_tensors: ClassVar[bool] = False  # True: saved tensors stay tensors on their device (the device tier)

    @abstractmethod
    def __init__(self, root: Path, partition_id: int, owner_key: int | str | None = None): ...

    @abstractmethod
    def _load(self) -> dict[str, np.ndarray]:
        """The partition's current arrays by name (read from the tier once, then held)."""

    def __contains__(self, key):  # without reading the member (Mapping's own asks for the value)
        return key in self._load()

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())

    @abstractmethod
    def keep_previous(self, name: str, key: str) -> bool:
        """Make `key` hold the current value of `name` without a copy where the tier can; False: copy it."""

    @abstractmethod
    def flush(self) -> None:
        """Make every change since the last flush durable at once; on failure the last flush's state stays."""

    @classmethod
    @abstractmethod
    def check_owner(cls, root: Path, state_key: int | str | None, key: str = "client-state-dir") -> None:
        """Refuse (fedsuite.state.folders.StateFolderTaken) a place that holds another run's state, or state of
        no known run; `state_key` None accepts only an empty place without owner."""

    @classmethod
    @abstractmethod
    def claim(cls, root: Path, state_key: int | str, results: str | None = None, key: str = "client-state-dir") -> None:
        """check_owner, then record the run as the place's owner."""


def settle(store: MutableMapping, accepted_round: int) -> None:
    """Keep the last write if the server accepted its round, else restore what it replaced; drop the copies."""
    if WRITE_ROUND not in store:
        return
    confirmed = int(np.asarray(store[WRITE_ROUND])[0]) == accepted_round
    for key in [k for k in store if k.startswith((PREVIOUS, ABSENT))]:
        name = key.split(":", 1)[1]
        if not confirmed:
            if key.startswith(PREVIOUS):
                store[name] = stored(store[key])
            elif name in store:
                del store[name]
        del store[key]
    del store[WRITE_ROUND]


def effective(store: MutableMapping, accepted_round: int) -> dict[str, np.ndarray]:
    """The vectors a client would train with next, given the server's last accepted round (for invariant checks;
    the store is not changed)."""
    copy = {k: host_array(store[k]) for k in store}
    settle(copy, accepted_round)
    return copy


def stored(value):
    """A stored value as a tier keeps it: a tensor as it is (the device tier's), anything else as a numpy array."""
    return value if isinstance(value, torch.Tensor) else np.asarray(value)


def host_array(value) -> np.ndarray:
    """A stored value as a numpy array on the host (a device tier's tensor is brought back)."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
