"""FedAdam / FedYogi / FedAdagrad (Reddi et al. 2021, Alg. 2; docs/algorithms/fedadam.md, fedyogi.md, fedadagrad.md).

Clients run plain local SGD and send Δ_i. Server, with Δ = mean_S(Δ_i) (the "+" sign, points downhill):
    m ← β1·m + (1−β1)·Δ
    v ← v + Δ²                              (Adagrad)
    v ← v − (1−β2)·Δ²·sign(v − Δ²)          (Yogi)
    v ← β2·v + (1−β2)·Δ²                    (Adam)
    x ← x + η_g · m / (√v + τ)
m = v = 0 initially; no bias correction (the paper's form, not newer Flower's); η_g is never decayed.
"""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedOpt(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("m"), Vector("v"))

    def __init__(
        self, settings: RuleSettings, server_lr: float = 0.1, beta1: float = 0.9, beta2: float = 0.99, tau: float = 0.01
    ):
        super().__init__(settings)
        self.server_lr, self.beta1, self.beta2, self.tau = server_lr, beta1, beta2, tau

    def second_moment(self, v: np.ndarray, delta_sq: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        delta = self.cohort_mean(replies, "delta")
        self.m = self.beta1 * self.m + (1.0 - self.beta1) * delta
        self.v = self.second_moment(self.v, delta * delta)
        return self.x + self.server_lr * self.m / (self.vectors.sqrt(self.v) + self.tau)


class FedAdam(FedOpt):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def second_moment(self, v, delta_sq):
        return self.beta2 * v + (1.0 - self.beta2) * delta_sq


class FedYogi(FedOpt):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def second_moment(self, v, delta_sq):
        return v - (1.0 - self.beta2) * delta_sq * self.vectors.sign(v - delta_sq)


class FedAdagrad(FedOpt):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def second_moment(self, v, delta_sq):
        return v + delta_sq
