"""A run's client-state plan: which state each client keeps, how large the federation's state is, where it lives
and in which tier. One answer for the launcher's preflight (simulation.run), the ServerApp, the ClientApp, a user's
own app and the client rules, so they never disagree (docs/running/scale.md#where-client-state-lives).

The state is the algorithm's declaration (its client's `state_specs`) plus the model's own (buffers='local': the
model's floating-point buffers, kept per client; relaxed-init: the client's last local model;
fedsuite.rules.declared.model_state) plus the round stages' (error feedback of compressed uploads, one vector per
upload vector: fedsuite.stages.compression.feedback_specs), put together by `client_specs` and nowhere else.
Its size is N × (d × vectors + buffer floats) × 4 B × 2 (fedsuite.state.sizing), and the backend follows from it:
memory while it fits the budget, else disk (client-state='auto'), or as the run config says. The tier that holds it
(fedsuite.state.tier) is chosen by `StatePlan.tier` and opened by `StatePlan.open_store`: for a federation in one
process, the training device while the state fits its share of an accelerator (or client-state='device'; the
budget is the host's and does not bound the card), else the process's memory, else files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedsuite.config.run_config import Config, ConfigError
from fedsuite.rules.declared import BUFFERS, StateSpec, model_state, units
from fedsuite.state import folders, sizing
from fedsuite.state.device_tier import DeviceTier
from fedsuite.state.file_tier import FileTier
from fedsuite.state.memory_tier import MemoryTier
from fedsuite.state.tier import StateTier

# The tiers that exist, by name, chosen in StatePlan.tier (docs/running/scale.md#tiers).
TIERS: dict[str, type[StateTier]] = {FileTier.name: FileTier, MemoryTier.name: MemoryTier, DeviceTier.name: DeviceTier}
DEVICE_SHARE = 0.25  # client-state='auto' puts the state on the accelerator while it takes at most this share of
# the card's memory (client-state-budget-mb bounds the host's memory, not the card's): the rest is the training's
DEVICE_NEEDS_ONE_PROCESS = (
    "client-state='device' keeps each client's state on the training device of the one process that runs the whole "
    "federation: it needs the in-process engine (simulation.run --engine inprocess) without checkpoint-every or "
    "resume-from (they copy state files); allowed otherwise: 'auto', 'memory', 'disk'"
)


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
    device_bytes: int = 0  # the training device's memory when it is an accelerator the state may live on, else 0

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
        return sizing.choose_backend(self.host_mode, self.num_clients, self.dim, self.vectors, self.budget_mb,
                                     self.extra)  # fmt: skip

    @property
    def host_mode(self) -> str:
        """The mode the host tiers size by: client-state='device' is memory state (kept on the device)."""
        return "memory" if self.mode == "device" else self.mode

    def tier(self) -> str | None:
        """The tier that holds the state (a name in TIERS; None: no client state): `memory` for memory state of a
        federation that runs in one process and never reads its state files (`one_process`), else `files` (a RAM
        folder for memory state, a disk folder otherwise), which every process of a run can read."""
        if not self.holds:
            return None
        if self.mode == "device" and not self.one_process:
            raise ConfigError(DEVICE_NEEDS_ONE_PROCESS)
        if self.one_process and self.on_device:
            return DeviceTier.name
        return MemoryTier.name if self.one_process and self.backend == "memory" else FileTier.name

    @property
    def on_device(self) -> bool:
        """Whether the state lives on the training device (in one process): asked for (client-state='device'), or
        client-state='auto' on an accelerator where the whole federation's state fits DEVICE_SHARE of the card's
        memory. client-state-budget-mb bounds the host's memory (the tiers behind this one), not the card's."""
        if self.mode == "device":
            return True
        if self.mode != "auto" or not self.device_bytes:
            return False
        total = sizing.state_bytes(self.num_clients, self.dim, self.vectors, self.extra)
        return total <= DEVICE_SHARE * self.device_bytes

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

    @property
    def kept_on_device(self) -> bool:
        """Whether the state is held on the training device: asked for, or chosen there in one process."""
        return self.holds and (self.mode == "device" or (self.one_process and self.on_device))

    def describe(self) -> str:
        if self.kept_on_device:
            total = sizing.state_bytes(self.num_clients, self.dim, self.vectors, self.extra)
            card = f" of the card's {self.device_bytes / 2**20:,.0f} MiB" if self.device_bytes else ""
            size = f"N={self.num_clients} × d={self.dim:,} × {self.vectors} vector(s) × 4 B × {sizing.COPIES}"
            return f"client state: {size} = {total / 2**20:,.1f} MiB{card} → on the training device, in the process"
        return sizing.describe(self.host_mode, self.num_clients, self.dim, self.vectors, self.budget_mb, self.extra)

    def capacity(self) -> tuple[str, str] | None:
        """fedsuite.state.sizing.capacity_check for this plan: ("error" | "warning", line) or None; state held on a
        CUDA card is compared with the card's memory."""
        if self.kept_on_device and self.device_bytes:
            total = sizing.state_bytes(self.num_clients, self.dim, self.vectors, self.extra)
            if total > self.device_bytes:
                need, has = total / 2**20, self.device_bytes / 2**20
                return "error", (f"client state needs {need:,.0f} MiB on the training device, which has {has:,.0f} "
                                 "MiB: use client-state='auto' or 'disk'")  # fmt: skip
            return None
        return sizing.capacity_check(self.host_mode, self.num_clients, self.dim, self.vectors, self.budget_mb,
                                     self.configured, self.extra)  # fmt: skip


def state_plan(cfg: Config, dim: int, buffer_floats: int, one_process: bool = False,
               device: torch.device | None = None) -> StatePlan:  # fmt: skip
    """The plan of a run with `cfg` for a model of `dim` trainable parameters and `buffer_floats` buffer floats.
    `one_process`: the caller runs the whole federation in this process (the in-process engine); the plan keeps
    memory state in the process only where the run neither writes nor resumes a checkpoint (they copy state files).
    `device`: the clients' training device; on an accelerator, state that fits its share stays there (`on_device`)."""
    from fedsuite.stages.compression import dimension_problem  # k ≤ d needs the model: refused here
    from fedsuite.stages.downlink import downlink_dimension_problem

    for problem in (dimension_problem(cfg, dim), downlink_dimension_problem(cfg, dim)):
        if problem is not None:
            raise ConfigError(problem)
    held, control = cfg.client_state, cfg.run_control
    files_read = bool(control.checkpoint_every) or bool(control.resume_from)
    return StatePlan(client_specs(cfg), cfg.num_clients, dim, buffer_floats, held.mode, held.budget_mb, held.dir,
                     one_process and not files_read, accelerator_bytes(device))  # fmt: skip


def accelerator_bytes(device: torch.device | None) -> int:
    """The memory of `device` when it is a CUDA card (client state may live there), else 0."""
    if device is None or torch.device(device).type != "cuda":
        return 0
    return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
