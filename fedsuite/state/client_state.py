"""`ClientState`: one client's persistent vectors as tensors on its training device, over any store of named arrays.

The client adapter (fedsuite/node/client.py) and the batched engine (fedsuite/batched/dispatch.py, through each
client's prepare and finish) read and write a partition's state only through this view, whichever tier holds it
(fedsuite.state.tier): once per fit it first settles the last write against the round the server accepted, and
`save` keeps the values a write replaces until the server confirms it.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import numpy as np
import torch

from fedsuite.state import tier
from fedsuite.state.tier import ABSENT, PREVIOUS, WRITE_ROUND, StateTier


class ClientState:
    """One client's persistent d-vectors as tensors on the training device.

    `store`: a tier (fedsuite.state.tier.StateTier) or any MutableMapping of arrays (a dict, for a client used
    outside a federation). `accepted_round`: the last round whose reply from this client the server accepted (0:
    none yet), as the server sent it; None skips the check. `names`: the client's declared state
    (fedsuite.rules.declared); a name outside it is a programming error, refused (None: any name)."""

    def __init__(self, store: MutableMapping, dim: int, device: torch.device | str = "cpu", names=None):
        self.store, self.dim, self.device = store, dim, device
        self.names = frozenset(names) if names is not None else None
        self.accepted_round: int | None = None
        self._tensors: dict[str, torch.Tensor] = {}
        self._reconciled = False

    def _declared(self, name: str) -> None:
        if self.names is not None and name not in self.names:
            raise KeyError(f"client state {name!r} is not declared (state_specs declares {sorted(self.names)})")

    def get(self, name: str) -> torch.Tensor:
        """The stored vector, or zeros on first use (every client state starts at 0)."""
        self._declared(name)
        self._reconcile()
        if name not in self._tensors:
            if name in self.store:
                value = self.store[name]
                if isinstance(value, torch.Tensor):  # the device tier's: a copy, so the stored one never changes
                    self._tensors[name] = value.to(self.device, copy=True)
                else:
                    self._tensors[name] = torch.tensor(np.asarray(value), device=self.device)
            else:
                self._tensors[name] = torch.zeros(self.dim, device=self.device)
        return self._tensors[name]

    def set(self, name: str, value: torch.Tensor) -> None:
        self._declared(name)
        self._reconcile()
        self._tensors[name] = value.detach().clone()

    def has(self, name: str) -> bool:
        self._reconcile()
        return name in self._tensors or name in self.store

    def save(self, server_round: int | None = None) -> None:
        """Write the vectors; with `server_round`, keep the ones they replace until the server confirms."""
        self._reconcile()
        tiered = isinstance(self.store, StateTier)
        if server_round is not None:
            for name in self._tensors:
                if name not in self.store:
                    self.store[ABSENT + name] = np.zeros(0, np.float32)
                elif not (tiered and self.store.keep_previous(name, PREVIOUS + name)):  # kept by the tier, or a copy
                    self.store[PREVIOUS + name] = tier.stored(self.store[name])
            self.store[WRITE_ROUND] = np.array([server_round], np.int64)
        on_device = tiered and self.store.holds_tensors  # the device tier keeps the tensors where they are
        for name, tensor in self._tensors.items():
            self.store[name] = tensor.detach() if on_device else tensor.detach().cpu().numpy()
        if tiered:
            self.store.flush()

    def _reconcile(self) -> None:
        """Once per fit, before anything is read: confirm or undo the last write (fedsuite.state.tier.settle)."""
        if self._reconciled:
            return
        self._reconciled = True
        if self.accepted_round is not None:
            tier.settle(self.store, self.accepted_round)
