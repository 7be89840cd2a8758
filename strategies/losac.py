"""LoSAC server (LoSAC paper, eq. 13; docs/algorithms/losac.md): broadcast (x, ϕ);
    x ← x + η_g·mean_S(Δx_i)       (agg-scale='1/N': η_g·Σ_S Δx_i / N, the literal eq. 13)
    ϕ ← ϕ + Σ_S Δϕ_i               (losac-phi-scale='N/S': ϕ + (N/|S|)·Σ_S Δϕ_i, the paper's factor)
Factor 1 keeps ϕ = Σ_n ḡ_n (every client's table mean, visited or not) exactly, as SCAFFOLD keeps c = mean c_i;
the N/S factor overshoots while clients are still unvisited (docs/algorithms/losac.md). |S| = the replies accepted
this round."""

from __future__ import annotations

import numpy as np

from fedsuite.local.variance import DELTA_PHI
from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class LoSAC(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("phi"),)
    sends = ("phi",)
    uplink = ("delta", DELTA_PHI)

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0, phi_scale: str = "1"):
        super().__init__(settings)
        self.server_lr, self.phi_scale = server_lr, phi_scale

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        factor = self.num_clients / self.cohort_size(replies) if self.phi_scale == "N/S" else 1.0
        self.phi = self.phi + factor * sum(r.arrays[DELTA_PHI] for r in replies)
        return self.x + self.server_lr * self.displacement(replies)
