"""The `memory` tier: client state kept as arrays in this process, for an engine that runs the whole federation in
one process (docs/running/scale.md#tiers).

Each run's place (`root`, the folder the files tier would use: it only names the place here) is a shelf: an owner
record and, per partition, the arrays of its last flush. A flush copies what changed into new read-only arrays and
puts the partition's new set in place with one assignment, so a failure while it copies leaves the last flush's
state, as a failed file write leaves the previous file; what a store reads after a flush is what the flush stored,
never an array its caller still holds and may change. Values already on the shelf are never copied again (the
previous vectors of a write are the shelf's own arrays, `keep_previous`), and are read-only: nothing can change a
flushed value in place.

The state lives as long as the process or until `release(root)`; nothing of it is on disk, so the plan chooses this
tier only where nothing reads the run's state files (fedsuite.state.plan.StatePlan.tier).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedsuite.state.files import KINDS
from fedsuite.state.folders import refuse_foreign
from fedsuite.state.tier import StateTier


@dataclass
class Shelf:
    """One run's client state in this process: its owner record and each partition's arrays as last flushed."""

    owner: dict | None = None  # {"state-key": …, "results": …}, as a folder's owner.json
    partitions: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)


_SHELVES: dict[str, Shelf] = {}  # str(root) → its shelf
_LOCK = threading.Lock()


def shelf(root: Path) -> Shelf:
    """The shelf of `root` (an empty one on first use)."""
    with _LOCK:
        return _SHELVES.setdefault(str(Path(root)), Shelf())


def holds(root: Path) -> bool:
    """Whether `root` has a shelf in this process (a run whose state the memory tier keeps)."""
    with _LOCK:
        return str(Path(root)) in _SHELVES


def release(root: Path) -> None:
    """Forget `root`'s client state (the end of its run, as removing a per-run folder)."""
    with _LOCK:
        _SHELVES.pop(str(Path(root)), None)


def frozen_copy(name: str, value) -> np.ndarray:
    """`value` as a new C-ordered read-only array; only numeric arrays are kept, as a state file stores them."""
    array = np.asarray(value)
    if array.dtype.kind not in KINDS:
        raise TypeError(f"client state {name!r} has dtype {array.dtype}: only numeric arrays are stored")
    copy = np.array(array, order="C", copy=True)
    copy.flags.writeable = False
    return copy


class MemoryTier(StateTier):
    """One partition's named arrays on its run's shelf (module docstring). Its arrays are the shelf's as they were
    when it was first read; changes stay with this store until `flush` puts them on the shelf."""

    name = "memory"

    def __init__(self, root: Path, partition_id: int, owner_key: int | str | None = None):
        """`owner_key`: the run's state key, recorded as the shelf's owner (claim) at its first flush."""
        self.root, self.partition_id, self.owner_key = Path(root), int(partition_id), owner_key
        self._arrays: dict[str, np.ndarray] | None = None
        self._flushed: dict[int, np.ndarray] = {}  # id → the shelf's arrays this store read (never copied again;
        # held here, so that no other array can take one's id)

    def _load(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = dict(shelf(self.root).partitions.get(self.partition_id, {}))
            self._flushed = {id(value): value for value in self._arrays.values()}
        return self._arrays

    def __getitem__(self, key):
        return self._load()[key]

    def __setitem__(self, key, value):
        self._load()[key] = value

    def __delitem__(self, key):
        del self._load()[key]

    def keep_previous(self, name: str, key: str) -> bool:
        """`key` becomes the shelf's own array of `name` (no copy: flushed arrays are read-only); False where the
        value of `name` is not one the shelf holds."""
        arrays = self._load()
        if name not in arrays or id(arrays[name]) not in self._flushed:
            return False
        arrays[key] = arrays[name]
        return True

    def flush(self) -> None:
        """Put this store's arrays on the shelf at once (module docstring); before the first, claim the shelf."""
        arrays = self._load()
        if self.owner_key is not None and shelf(self.root).owner is None:
            self.claim(self.root, self.owner_key)
        kept = {key: value if id(value) in self._flushed else self._frozen(key, value) for key, value in arrays.items()}
        shelf(self.root).partitions[self.partition_id] = kept  # one assignment: the new set, whole, or the old one
        self._arrays, self._flushed = dict(kept), {id(value): value for value in kept.values()}

    def _frozen(self, key: str, value) -> np.ndarray:
        """What the shelf keeps of a value it does not hold yet: a read-only copy."""
        return frozen_copy(key, value)

    @classmethod
    def check_owner(cls, root: Path, state_key: int | str | None, key: str = "client-state-dir") -> None:
        with _LOCK:
            held = _SHELVES.get(str(Path(root))) or Shelf()  # a check leaves no shelf behind
        refuse_foreign(held.owner, any(held.partitions.values()), state_key, str(root), key)

    @classmethod
    def claim(cls, root: Path, state_key: int | str, results: str | None = None, key: str = "client-state-dir") -> None:
        with _LOCK:
            held = _SHELVES.setdefault(str(Path(root)), Shelf())
            refuse_foreign(held.owner, any(held.partitions.values()), state_key, str(root), key)
            if held.owner is None:
                held.owner = {"state-key": str(state_key), "results": results}
