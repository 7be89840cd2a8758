"""FedADMM servers (docs/algorithms/fedadmm.md).
'wang' (default): x̄ ← x̄ + (1/N)·Σ_{i∈S} Δx̂_i, z^{t+1} = x̄ (x̄^0 = x^0 = mean_N of the initial x̂_i);
    exact at its fixed point under partial participation, like FedDyn.
'gong': x^{t+1} = x^t + η_g·mean_S(u_i); converges to argmin f + (ρ/2)‖x − x^0‖² (anchored at x^0)."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedADMM(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def __init__(self, settings: RuleSettings, variant: str = "wang", server_lr: float = 1.0):
        super().__init__(settings)
        self.variant, self.server_lr = variant, server_lr
        self.uplink = ("u",) if variant == "gong" else ("delta_xhat",)

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        if self.variant == "gong":
            return self.x + self.server_lr * self.cohort_mean(replies, "u")
        return self.x + sum(r.arrays["delta_xhat"] for r in replies) / self.num_clients
