"""SCAFFOLD server (docs/algorithms/scaffold.md): broadcast (x, c);
x^{t+1} = x^t + η_g·mean_S(Δ_i),  c ← c + (1/N)·Σ_{i∈S} Δc_i  (keeps c = mean_N(c_i) exactly; unweighted)."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class Scaffold(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("c"),)
    sends = ("c",)
    uplink = ("delta", "delta_c")

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0):
        super().__init__(settings)
        self.server_lr = server_lr

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        self.c = self.c + sum(r.arrays["delta_c"] for r in replies) / self.num_clients
        return self.x + self.server_lr * self.displacement(replies)
