"""Per-partition client state (SCAFFOLD c_i, FedDyn ∇L_i, FedSpeed ĝ_i, FedADMM λ_i …), docs/algorithms/index.md:
the names of fedsuite/state/ in one place, as every module imported them before the store was split by job.

- fedsuite.state.plan: the run's StatePlan (the specs, the backend, the folder, the tier) and the tier registry;
- fedsuite.state.tier: the StateTier interface and the accepted-round rule every tier shares (settle, effective);
- fedsuite.state.file_tier: the `files` tier (one file per partition, replaced atomically; `DiskStore` is its
  former name); fedsuite.state.memory_tier: the `memory` tier (arrays kept in the process);
- fedsuite.state.client_state: ClientState, one client's vectors as tensors over any tier;
- fedsuite.state.sizing: the estimate, the backend and the capacity check;
- fedsuite.state.folders: where the files live (state_root) and whose they are (owner, check_owner, claim).

One write only: state held on the nodes (not in checkpoints) follows a resumed run exactly when the crashed run
trained at most one round past the checkpoint (checkpoint-every=1; fedsuite.results.checkpoint.check_node_held_state).
"""

from __future__ import annotations

from fedsuite.state.client_state import ClientState
from fedsuite.state.file_tier import NO_HARD_LINKS, FileTier
from fedsuite.state.files import (
    Index,
    StateFileError,
    read_arrays,
    read_index,
    read_linked,
    read_member,
    write_state_file,
)
from fedsuite.state.folders import (
    LEGACY_SUFFIX,
    OWNER,
    SHARED_MEMORY,
    STATE_FILE_PATTERNS,
    STATE_SUFFIX,
    StateFolderTaken,
    check_owner,
    claim,
    file_arrays,
    is_run_scoped,
    owner,
    state_files,
    state_folder,
    state_root,
)
from fedsuite.state.memory_tier import MemoryTier
from fedsuite.state.sizing import (
    BYTES_PER_FLOAT,
    COPIES,
    WARN_FRACTION,
    capacity_check,
    choose_backend,
    describe,
    free_bytes,
    memory_available,
    room,
    state_bytes,
)
from fedsuite.state.tier import ABSENT, PREVIOUS, WRITE_ROUND, StateTier, effective, settle

DiskStore = FileTier  # the files tier's name before the tiers (plug-ins and fedsuite.run.inprocess use it)

__all__ = [
    "ABSENT", "BYTES_PER_FLOAT", "COPIES", "LEGACY_SUFFIX", "NO_HARD_LINKS", "OWNER", "PREVIOUS", "SHARED_MEMORY",
    "STATE_FILE_PATTERNS", "STATE_SUFFIX", "WARN_FRACTION", "WRITE_ROUND", "ClientState", "DiskStore", "FileTier",
    "Index", "MemoryTier", "StateFileError", "StateFolderTaken", "StateTier", "capacity_check", "check_owner",
    "choose_backend", "claim", "describe", "effective", "file_arrays", "free_bytes", "is_run_scoped",
    "memory_available", "owner", "read_arrays", "read_index", "read_linked", "read_member", "room", "settle",
    "state_bytes", "state_files", "state_folder", "state_root", "write_state_file",
]  # fmt: skip
