"""FedLADA server (ALGORITHMS.md §3.6, reconstructed [verify]): broadcast (x, g_a, v̄), g_a^0 = v̄^0 = 0;
x^{t+1} = x^t + η_g·mean_S(Δ_i),  g_a^{t+1} = −mean_S(Δ_i/(K_i·η_l)) (this round's η_l, each client's K_i),
v̄^{t+1} = mean_S(v_i) (the clients' final second moments). Hyper-parameters: server-lr η_g = 1."""

from __future__ import annotations

import numpy as np

from strategies.base import FedStrategy, Reply, RunPlan


class FedLADA(FedStrategy):
    uplink_names = ("delta", "v")

    def __init__(self, plan: RunPlan, server_lr: float = 1.0):
        super().__init__(plan)
        self.server_lr = server_lr
        self.g_a = np.zeros(self.dim, np.float64)
        self.v = np.zeros(self.dim, np.float64)

    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        return {"g_a": self.g_a, "v": self.v}

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        self.g_a = self.cohort_mean(replies, lambda r: -r.arrays["delta"] / (r.lr * r.steps))
        self.v = self.cohort_mean(replies, "v")
        return self.x + self.server_lr * self.cohort_mean(replies, "delta")
