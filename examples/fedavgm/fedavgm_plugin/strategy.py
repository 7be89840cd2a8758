"""FedAvgM server rule: v ← β v + mean_S(Δ_i), x ← x + η_g v (v^0 = 0). β = 0 is FedAvg bit for bit.

The momentum v is declared state, so checkpoints, resume and the registry's tables cover it without more code.
"""

from __future__ import annotations

import numpy as np
from fedsuite.declared import Vector
from fedsuite.rule import Reply, RuleSettings, ServerRule


class FedAvgM(ServerRule):
    state = (Vector("v"),)

    def __init__(self, settings: RuleSettings, beta: float = 0.9, server_lr: float = 1.0):
        super().__init__(settings)
        self.beta = beta
        self.server_lr = server_lr

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        self.v = self.beta * self.v + self.displacement(replies)
        return self.x + self.server_lr * self.v
