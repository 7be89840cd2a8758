"""The run guard: when a run cannot go on truthfully. Each check returns (status, reason) or None; the adapter
records the round with that status and raises RunAborted.

- a lost simulation worker (Flower never replaces a dead Ray actor): failed;
- fewer valid replies than `min-replies` of the cohort: failed, or diverged when most were lost to non-finite
  training;
- a non-finite aggregated model: diverged;
- a non-finite test loss, or one above `divergence-factor` × the initial loss: diverged.
"""

from __future__ import annotations

import math
from typing import Any

from fedsuite.declared import Value

Verdict = tuple[str, str] | None


class RunAborted(RuntimeError):
    """The run cannot go on truthfully; summary.json already holds `status` and the reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


class RunGuard:
    state = (Value("initial_loss"),)

    def __init__(self, min_replies: float, divergence_factor: float):
        self.min_replies, self.divergence_factor = min_replies, divergence_factor
        self.initial_loss: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"initial_loss": self.initial_loss}

    def load_state_dict(self, values: dict[str, Any]) -> None:
        self.initial_loss = values["initial_loss"]

    def lost_workers(self, server_round: int, dead: int) -> Verdict:
        if not dead:
            return None
        return "failed", (
            f"round {server_round}: a simulation worker (Ray actor) died ({dead} client(s) lost; killed, "
            "or out of memory?). Flower does not replace it, so every later round would lose the clients "
            "scheduled on it: the run stops here. Start it again: the same seed gives the same cohorts and "
            "numbers (lower the memory per client, or fewer parallel clients, if memory was the cause)"
        )

    def replies(self, server_round: int, valid: int, cohort: int, rejected: int, diverged: int, failed: int) -> Verdict:
        needed = max(1, math.ceil(self.min_replies * cohort)) if self.min_replies > 0 else 0
        if valid >= needed:
            return None
        status = "diverged" if diverged * 2 > cohort - valid else "failed"
        cause = "training diverged (non-finite values)" if status == "diverged" else "clients failed or were rejected"
        return status, (
            f"round {server_round}: {valid} valid replies from a cohort of {cohort}, min-replies="
            f"{self.min_replies:g} needs {needed}; {cause} ({rejected} rejected, {failed} failed; "
            "reasons above and in clients.log)"
        )

    def model(self, server_round: int, finite: bool) -> Verdict:
        return None if finite else ("diverged", f"round {server_round}: the aggregated global model is not finite")

    def test_loss(self, server_round: int, loss: float | None) -> Verdict:
        """Non-finite, or above divergence-factor × the initial loss (the first finite loss seen)."""
        if loss is None:
            return None
        if not math.isfinite(loss):
            return "diverged", f"round {server_round}: the test loss is {loss}"
        if self.initial_loss is None:
            self.initial_loss = abs(float(loss))
            return None
        limit = self.divergence_factor * max(self.initial_loss, 1e-12)
        if self.divergence_factor > 0 and loss > limit:
            return "diverged", (
                f"round {server_round}: the test loss {loss:.4g} exceeds divergence-factor="
                f"{self.divergence_factor:g} × the initial loss {self.initial_loss:.4g}; lower lr"
            )
        return None
