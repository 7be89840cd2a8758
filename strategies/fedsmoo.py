"""FedSMOO server (docs/algorithms/fedsmoo.md) = FedDyn's server (code form, client-held duals) plus the global
perturbation s, in the form of the authors' code (FL-Simulator server/FedSMOO.py):
    h_i ← h_i + Δ_i,   x^{t+1} = mean_S(x_{i,K}) + mean_N(h_i),   s = ρ·m/(‖m‖ + 1e-7),  m = mean_S(ν_i)
with ν_i the clients' new dynamic duals of this round. s (zeros at first) goes to every sampled client (+1 d)."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings

from .feddyn import FedDyn


class FedSMOO(FedDyn):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    sends = ("s",)
    uplink = ("delta", "nu")

    def __init__(self, settings: RuleSettings, rho: float):
        super().__init__(settings, "client")
        self.rho = rho

    def state_specs(self):
        return (*super().state_specs(), Vector("s"))

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        new_x = super().aggregate(server_round, replies)
        m = self.cohort_mean(replies, "nu")
        self.s = self.rho * m / (self.vectors.norm(m) + 1e-7)
        return new_x
