"""FedSpeed server (docs/algorithms/fedspeed.md) = FedDyn's server with a choice of dual aggregation:
    dual_agg='all' (official code, default): x^{t+1} = mean_S(x_{i,K}) + mean_N(h_i)
    dual_agg='sampled' (thesis Alg. 2 l.16):  x^{t+1} = mean_S(x̂_i),  x̂_i = x_{i,K} + h_i,  h_i = −ĝ_i/μ.
The two coincide under full participation. FedSpeed-Ing (docs/algorithms/fedspeed-ing.md) adds the extrapolated
prox centre x̃^t."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings

from .feddyn import FedDyn


class FedSpeed(FedDyn):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def __init__(self, settings: RuleSettings, dual_storage: str = "client", dual_agg: str = "all"):
        super().__init__(settings, dual_storage)
        self.dual_agg = dual_agg
        if dual_agg == "sampled" and dual_storage == "client":
            self.uplink = ("delta_hat", *self.start_shift)  # the client uploads x̂_i − x^t

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        if self.dual_agg == "all":
            return super().aggregate(server_round, replies)
        if self.dual_storage == "client":
            return self.local_models_mean(replies, "delta_hat")
        self.record_duals(replies)
        if self.start_shift:  # relaxed-init: x̂_i = x_{i,0} + Δ_i + h_i
            return self.x + self.cohort_mean(
                replies, lambda r: r.arrays["delta"] + r.arrays["start_shift"] + self.h_table[r.partition_id]
            )
        return self.x + self.cohort_mean(replies, lambda r: r.arrays["delta"] + self.h_table[r.partition_id])


class FedSpeedIng(FedSpeed):
    """Server keeps x^{t−1} and broadcasts x̃^t = x^t + ζ(x^t − x^{t−1}), x̃^0 = x^0 (+1 d downlink)."""

    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    sends = ("x_tilde",)

    def __init__(self, settings: RuleSettings, zeta: float, dual_agg: str = "all"):
        super().__init__(settings, "client", dual_agg)
        self.zeta = zeta
        self.x_prev = self.vectors.wide(self.x)  # x^{−1} = x^0

    def state_specs(self):
        return (*super().state_specs(), Vector("x_prev"))

    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        return {"x_tilde": self.x + self.zeta * (self.x - self.x_prev)}

    def empty_round(self, server_round: int) -> None:
        self.x_prev = self.vectors.wide(self.x)  # x^{t+1} = x^t: the next extrapolation adds nothing

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        self.x_prev = self.vectors.wide(self.x)
        return super().aggregate(server_round, replies)
