"""A run's client state as a whole, wherever its tier keeps it: removed at the end of the run, and one partition's
reopened for reading (tests, the verification kit). The file tier keeps it in the run's folder, the memory tier on
the run's shelf (keyed by the same folder's path), so both are found from the run's root (docs/running/scale.md#tiers).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fedsuite.state import memory_tier
from fedsuite.state.file_tier import FileTier
from fedsuite.state.tier import StateTier


def remove(root: Path) -> None:
    """Remove the run's client state at `root`: its folder and any shelf of it."""
    shutil.rmtree(root, ignore_errors=True)
    memory_tier.release(root)


def reopen(root: Path, partition_id: int) -> StateTier:
    """A fresh view of partition `partition_id`'s state of the run at `root`, in the tier that holds it."""
    if memory_tier.holds(root):
        return memory_tier.MemoryTier(root, partition_id)
    return FileTier(root, partition_id)
