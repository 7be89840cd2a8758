"""FedNova server (Wang et al., NeurIPS 2020, plain local SGD; docs/algorithms/fednova.md): clients run FedAvg's
local SGD and send Δ_i = x_{i,K_i} − x^t; a_i = K_i is the step count every reply carries (‖a_i‖₁ of plain SGD).
    τ_eff = Σ_S p_i a_i,   x^{t+1} = x^t + η_g · Σ_S p_i (τ_eff / a_i) Δ_i
i.e. x^t − η_g τ_eff Σ p_i d_i with the normalised update d_i = −Δ_i / a_i; p_i = the suite's cohort weights
(`weighting`: uniform, or n_i as the paper). Equal a_i make τ_eff / a_i exactly 1: FedAvg bit for bit."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedNova(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0):
        super().__init__(settings)
        self.server_lr = server_lr

    def effective_steps(self, replies: list[Reply]) -> float:
        """τ_eff = Σ_S p_i a_i: integer sums divided once, so equal a_i = K give K exactly."""
        if self.settings.weighting == "samples":
            return sum(r.num_examples * r.steps for r in replies) / sum(r.num_examples for r in replies)
        return sum(r.steps for r in replies) / len(replies)

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        tau = self.effective_steps(replies)
        return self.x + self.server_lr * self.cohort_mean(replies, lambda r: (tau / r.steps) * r.arrays["delta"])
