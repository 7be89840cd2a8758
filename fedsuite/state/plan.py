"""A run's client-state plan: which state each client keeps, how large the federation's state is, where it lives
and in which tier. One answer for the launcher's preflight (simulation.run), the ServerApp, the ClientApp, a user's
own app and the client rules, so they never disagree (docs/running/scale.md#where-client-state-lives).

The state is the algorithm's declaration (its client's `state_specs`) plus the model's own (buffers='local': the
model's floating-point buffers, kept per client; relaxed-init: the client's last local model;
fedsuite.rules.declared.model_state) plus the round stages' (error feedback of compressed uploads, one vector per
upload vector: fedsuite.stages.compression.feedback_specs), put together by `client_specs` and nowhere else.
Its size is N × (d × vectors + buffer floats) × 4 B × 2 (fedsuite.state.sizing), and the backend follows from it:
memory while it fits the budget, else disk (client-state='auto'), or as the run config says. The tier that holds it
(fedsuite.state.tier) is chosen by `StatePlan.tier` and opened by `StatePlan.open_store`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsuite.config.run_config import Config, ConfigError
from fedsuite.rules.declared import BUFFERS, StateSpec, model_state, units
from fedsuite.state import folders, sizing
from fedsuite.state.file_tier import FileTier
from fedsuite.state.memory_tier import MemoryTier
from fedsuite.state.tier import StateTier

# The tiers that exist, by name. A tier that keeps the arrays on the accelerator would be registered here and
# chosen in StatePlan.tier; nothing else changes (docs/running/scale.md#tiers).
TIERS: dict[str, type[StateTier]] = {FileTier.name: FileTier, MemoryTier.name: MemoryTier}


def client_specs(cfg: Config, client: Any = None) -> tuple[StateSpec, ...]:
    """Every vector each client keeps between rounds under `cfg`: the declaration of `client` (a ClientRule class;
    default: the registry's client of cfg's algorithm), then the model's own state. The one place the specs are
    put together: the plan, the client rules, a user's app and the verification kit ask here."""
    if client is None:
        from fedsuite.registry import costs  # the registry knows every client class; imported when first asked

        declared = costs.client_state(cfg.algorithm, cfg)
    else:
        declared = client.state_specs(cfg)
    return tuple(declared) + model_state(cfg.buffers, cfg.local.relaxed_init) + stage_specs(cfg)


def stage_specs(cfg: Config) -> tuple[StateSpec, ...]:
    """The client state the run's client stages keep (compressed uploads' error feedback, the copies of compressed
    broadcasts); none when they keep none."""
    specs: tuple[StateSpec, ...] = ()
    if cfg.compression.feedback != "none":
        from fedsuite.stages.compression import feedback_specs  # builds the rule to learn its upload vectors

        specs += feedback_specs(cfg)
    if cfg.compression.downlink != "none":
        from fedsuite.stages.downlink import downlink_specs  # builds the rule to learn its broadcast vectors

        specs += downlink_specs(cfg)
    return specs


@dataclass(frozen=True)
class StatePlan:
    specs: tuple[StateSpec, ...]
    num_clients: int
    dim: int  # d, the trainable parameters
    buffer_floats: int  # the model's floating-point buffers (kept per client with buffers='local')
    mode: str  # client-state: auto, memory or disk
    budget_mb: float
    configured: str  # client-state-dir ('' = a per-run temporary folder)
    one_process: bool = False  # the whole federation runs in this process, and nothing reads its state files
    # (no checkpoint written or resumed): memory state may then stay in the process (the memory tier)

    @property
    def holds(self) -> bool:
        """Whether clients keep anything between rounds."""
        return bool(self.specs)

    @property
    def vectors(self) -> int:
        return units(self.specs)

    @property
    def extra(self) -> int:
        """Floats per client beside the d-vectors: the model's buffers under buffers='local'."""
        return self.buffer_floats if BUFFERS in self.specs else 0

    @property
    def backend(self) -> str | None:
        """'memory' or 'disk' (None: no client state)."""
        if not self.holds:
            return None
        return sizing.choose_backend(self.mode, self.num_clients, self.dim, self.vectors, self.budget_mb, self.extra)

    def tier(self) -> str | None:
        """The tier that holds the state (a name in TIERS; None: no client state): `memory` for memory state of a
        federation that runs in one process and never reads its state files (`one_process`), else `files` (a RAM
        folder for memory state, a disk folder otherwise), which every process of a run can read."""
        if not self.holds:
            return None
        return MemoryTier.name if self.one_process and self.backend == "memory" else FileTier.name

    def root(self, run_id: int) -> Path | None:
        """The folder of run `run_id`'s client-state files (None: no client state); the memory tier's name for
        the run's shelf."""
        return folders.state_root(self.backend, self.configured, run_id) if self.holds else None

    def open_store(self, root: Path, partition_id: int, owner_key: int | str | None = None) -> StateTier:
        """Partition `partition_id`'s state in the plan's tier at `root` (plan.root(run_id), or a folder of the
        caller's); `owner_key`, the run's state key, is recorded as the place's owner at its first write."""
        return TIERS[self.tier() or FileTier.name](root, partition_id, owner_key)

    def disk_folder(self) -> Path | None:
        """Where the state goes on disk, for the preflight's writability check: the client-state-dir, or the
        temporary folder that holds the per-run folders; None when the state stays in memory or there is none."""
        if self.backend != "disk":
            return None
        return folders.state_folder("disk", self.configured)

    def describe(self) -> str:
        return sizing.describe(self.mode, self.num_clients, self.dim, self.vectors, self.budget_mb, self.extra)

    def capacity(self) -> tuple[str, str] | None:
        """fedsuite.state.sizing.capacity_check for this plan: ("error" | "warning", line) or None."""
        return sizing.capacity_check(self.mode, self.num_clients, self.dim, self.vectors, self.budget_mb,
                                     self.configured, self.extra)  # fmt: skip


def state_plan(cfg: Config, dim: int, buffer_floats: int, one_process: bool = False) -> StatePlan:
    """The plan of a run with `cfg` for a model of `dim` trainable parameters and `buffer_floats` buffer floats.
    `one_process`: the caller runs the whole federation in this process (the in-process engine); the plan keeps
    memory state in the process only where the run neither writes nor resumes a checkpoint (they copy state files)."""
    from fedsuite.stages.compression import dimension_problem  # k ≤ d needs the model: refused here
    from fedsuite.stages.downlink import downlink_dimension_problem

    for problem in (dimension_problem(cfg, dim), downlink_dimension_problem(cfg, dim)):
        if problem is not None:
            raise ConfigError(problem)
    held, control = cfg.client_state, cfg.run_control
    files_read = bool(control.checkpoint_every) or bool(control.resume_from)
    return StatePlan(client_specs(cfg), cfg.num_clients, dim, buffer_floats, held.mode, held.budget_mb, held.dir,
                     one_process and not files_read)  # fmt: skip
