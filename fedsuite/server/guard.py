"""The run guard: when a run cannot go on truthfully. Each check returns (status, reason) or None; the adapter
records the round with that status and raises RunAborted.

- a lost simulation worker (Flower never replaces a dead Ray actor): failed;
- fewer valid replies than `min-replies` of the cohort: failed, or diverged when most were lost to non-finite
  training;
- a non-finite aggregated model: diverged;
- a non-finite test loss, or one above `divergence-factor` × the initial loss: diverged;
- the cohort's train loss non-finite, or above `divergence-factor` × the initial model's train loss: diverged
  (learning destroyed while the test loss alone could still look bounded, e.g. at chance accuracy). That reference
  is taken before any training: the first round's clients report the loss of their first step, at the received
  initial model (`first-loss`); only replies without it fall back to the first round's train loss, which an lr
  that blows up in the first steps would already have inflated.
"""

from __future__ import annotations

import math
from typing import Any

from fedsuite.rules.declared import Value

Verdict = tuple[str, str] | None


class RunAborted(RuntimeError):
    """The run cannot go on truthfully; summary.json already holds `status` and the reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


class RunGuard:
    state = (Value("initial_loss"), Value("initial_train_loss"))

    def __init__(self, min_replies: float, divergence_factor: float):
        self.min_replies, self.divergence_factor = min_replies, divergence_factor
        self.initial_loss: float | None = None
        self.initial_train_loss: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {spec.name: getattr(self, spec.name) for spec in self.state}

    def load_state_dict(self, values: dict[str, Any]) -> None:
        for spec in self.state:
            setattr(self, spec.name, values[spec.name])

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
        needed = max(1, math.ceil(self.min_replies * cohort)) if self.min_replies > 0 and cohort else 0
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
        return self._loss(server_round, loss, "initial_loss", "test loss", "the initial loss")

    def train_loss(self, server_round: int, loss: float | None, start_loss: float | None = None) -> Verdict:
        """The cohort's mean train loss: non-finite, or above divergence-factor × the initial model's train loss
        (`start_loss`: the cohort's loss at the received model before any step, taken as the reference when none
        is set yet; without it, the first train loss seen)."""
        if self.initial_train_loss is None and start_loss is not None and math.isfinite(start_loss):
            self.initial_train_loss = abs(float(start_loss))
        return self._loss(
            server_round, loss, "initial_train_loss", "cohort's train loss", "the initial model's train loss"
        )

    def _loss(self, server_round: int, loss: float | None, first: str, what: str, reference: str) -> Verdict:
        if loss is None:
            return None
        if not math.isfinite(loss):
            return "diverged", f"round {server_round}: the {what} is {loss}"
        if getattr(self, first) is None:
            setattr(self, first, abs(float(loss)))
            return None
        limit = self.divergence_factor * max(getattr(self, first), 1e-12)
        if self.divergence_factor > 0 and loss > limit:
            return "diverged", (
                f"round {server_round}: the {what} {loss:.4g} exceeds divergence-factor="
                f"{self.divergence_factor:g} × {reference} {getattr(self, first):.4g}; lower lr"
            )
        return None
