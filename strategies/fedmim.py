"""FedMIM server (docs/algorithms/fedmim.md). After each round δ_{t+1} = −(x_{t+1} − x_t)/K (K of that round, mean over
the cohort; η_l is not divided out), with δ = 0 before the first round; it broadcasts
    a_t = Σ_j α_j δ_{t−j},   b_t = Σ_j β_j δ_{t−j}   (j = 0 the newest; +2 d downlink)
and x_{t+1} = x_t + η_g·mean_S(Δ_i). J = len(alphas); J = 1, β = 0, α_0 = 1 − α_FedCM is FedCM (no lr decay)."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import History
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedMIM(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    sends = ("a", "b")

    def __init__(
        self, settings: RuleSettings, alphas: tuple[float, ...], betas: tuple[float, ...], server_lr: float = 1.0
    ):
        self.alphas, self.betas, self.server_lr = alphas, betas, server_lr
        super().__init__(settings)

    def state_specs(self):
        return (History("history", length=len(self.alphas)),)  # δ_t, δ_{t−1}, … newest first

    def _combine(self, weights: tuple[float, ...]) -> np.ndarray:
        out = self.vectors.zeros(self.dim)
        for w, delta in zip(weights, self.history, strict=False):
            out += w * delta
        return out

    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        return {"a": self._combine(self.alphas), "b": self._combine(self.betas)}

    def empty_round(self, server_round: int) -> None:
        self.history.appendleft(self.vectors.zeros(self.dim))  # δ = 0: x did not move

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        x_new = self.x + self.server_lr * self.cohort_mean(replies, "delta")
        steps = float(np.mean([r.steps for r in replies]))
        self.history.appendleft(-(x_new - self.x) / steps)
        return x_new
