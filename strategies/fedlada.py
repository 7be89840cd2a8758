"""FedLADA server (docs/algorithms/fedlada.md, reconstructed [verify]): broadcast (x, g_a, v̄), g_a^0 = v̄^0 = 0;
x^{t+1} = x^t + η_g·mean_S(Δ_i),  g_a^{t+1} = −mean_S(Δ_i/(K_i·η_l)) (this round's η_l, each client's K_i),
v̄^{t+1} = mean_S(v_i) (the clients' final second moments). Hyper-parameters: server-lr η_g = 1."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedLADA(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("g_a"), Vector("v"))
    sends = ("g_a", "v")
    uplink = ("delta", "v")

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0):
        super().__init__(settings)
        self.server_lr = server_lr

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        self.g_a = self.cohort_mean(replies, lambda r: -r.arrays["delta"] / (r.lr * r.steps))
        self.v = self.cohort_mean(replies, "v")
        return self.x + self.server_lr * self.cohort_mean(replies, "delta")
