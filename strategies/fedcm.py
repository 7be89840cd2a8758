"""FedCM server (docs/algorithms/fedcm.md, App. C form): broadcast (x, D), D^0 = 0;
D^{t+1} = −mean_S(Δ_i / (η_l K_i))   with each client's own K_i and this round's η_l (never scaled by η_g),
x^{t+1} = x^t + η_g·mean_S(Δ_i)      (η_g = 1 ⇔ averaging client models).
MoFedSAM (docs/algorithms/mofedsam.md) uses this server unchanged."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedCM(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("D"),)
    sends = ("D",)

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0):
        super().__init__(settings)
        self.server_lr = server_lr

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        self.D = self.cohort_mean(replies, lambda r: -r.arrays["delta"] / (r.lr * r.steps))
        return self.x + self.server_lr * self.cohort_mean(replies, "delta")
