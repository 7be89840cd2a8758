"""A run's client-state plan: which state each client keeps, how large the federation's state is, and where it
lives. One answer for the launcher's preflight (simulation.run), the ServerApp and the ClientApp, so they never
disagree about the folder (docs/running/scale.md#where-client-state-lives).

The state is the algorithm's declaration (its client's `state_specs`) plus the model's own (buffers='local': the
model's floating-point buffers, kept per client, fedsuite.rules.declared.model_state). Its size is N × (d × vectors +
buffer floats) × 4 B × 2 (fedsuite.state.store), and the backend follows from it: memory while it fits the budget,
else disk (client-state='auto'), or as the run config says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedsuite.config.run_config import Config
from fedsuite.registry import costs
from fedsuite.rules.declared import BUFFERS, StateSpec, model_state, units
from fedsuite.state import store as state


@dataclass(frozen=True)
class StatePlan:
    specs: tuple[StateSpec, ...]
    num_clients: int
    dim: int  # d, the trainable parameters
    buffer_floats: int  # the model's floating-point buffers (kept per client with buffers='local')
    mode: str  # client-state: auto, memory or disk
    budget_mb: float
    configured: str  # client-state-dir ('' = a per-run temporary folder)

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
        return state.choose_backend(self.mode, self.num_clients, self.dim, self.vectors, self.budget_mb, self.extra)

    def root(self, run_id: int) -> Path | None:
        """The folder of run `run_id`'s client-state files (None: no client state)."""
        return state.state_root(self.backend, self.configured, run_id) if self.holds else None

    def disk_folder(self) -> Path | None:
        """Where the state goes on disk, for the preflight's writability check: the client-state-dir, or the
        temporary folder that holds the per-run folders; None when the state stays in memory or there is none."""
        if self.backend != "disk":
            return None
        return state.state_folder("disk", self.configured)

    def describe(self) -> str:
        return state.describe(self.mode, self.num_clients, self.dim, self.vectors, self.budget_mb, self.extra)

    def capacity(self) -> tuple[str, str] | None:
        """fedsuite.state.store.capacity_check for this plan: ("error" | "warning", line) or None."""
        return state.capacity_check(self.mode, self.num_clients, self.dim, self.vectors, self.budget_mb,
                                    self.configured, self.extra)  # fmt: skip


def state_plan(cfg: Config, dim: int, buffer_floats: int) -> StatePlan:
    """The plan of a run with `cfg` for a model of `dim` trainable parameters and `buffer_floats` buffer floats."""

    specs = costs.client_state(cfg.algorithm, cfg) + model_state(cfg.buffers, cfg.local.relaxed_init)
    held = cfg.client_state
    return StatePlan(tuple(specs), cfg.num_clients, dim, buffer_floats, held.mode, held.budget_mb, held.dir)
