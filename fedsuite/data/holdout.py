"""A client's held-out splits: validation data and, where the data has no per-client test split, test data, drawn
from its local training rows by (seed, partition id) only, so the server can redraw any client's split (central
validation evaluates the union of them).

Rounding: a share s of n rows holds out floor(s·n) rows; validation is drawn first, the local test share second,
and together they never take the last training row (a client with 1 row keeps it for training and holds out
nothing). The draw is one seeded permutation of the n positions: validation = its first rows, test = the next ones,
training = the rest in their original order. With nothing held out, training is the rows as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LocalSplits:
    """Positions (into a client's local rows) of its training, validation and local test data, each sorted."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray

    @property
    def holds_out(self) -> bool:
        return bool(len(self.validation) or len(self.test))


def held_out_count(n: int, share: float, already: int = 0) -> int:
    """floor(share·n), capped so that at least one of the n rows stays for training after `already` are taken."""
    return max(0, min(int(np.floor(share * n)), n - 1 - already))


def local_splits(
    n: int, seed: int, partition_id: int, validation_fraction: float, test_fraction: float = 0.0
) -> LocalSplits:
    """Client `partition_id`'s n local rows split by (seed, partition id): validation share, then the local test
    share (0 when the client's test data comes from elsewhere), training the rest (module docstring)."""
    n_val = held_out_count(n, validation_fraction)
    n_test = held_out_count(n, test_fraction, n_val)
    empty = np.zeros(0, dtype=np.int64)
    if n_val + n_test == 0:
        return LocalSplits(np.arange(n, dtype=np.int64), empty, empty)
    order = np.random.default_rng([seed, partition_id, 0x484F4C44]).permutation(n)  # "HOLD"
    validation, test = np.sort(order[:n_val]), np.sort(order[n_val : n_val + n_test])
    return LocalSplits(np.sort(order[n_val + n_test :]), validation, test)
