"""FAdamET / FAdamGT server (FAdamET paper, Alg. 1; docs/algorithms/fadamet.md, fadamgt.md). One server for
both: they differ only in where the client puts the tracking correction.

Each round: the cohort S^t and the tracking subset Y^t ⊆ S^t (`Sampler.tracking`, from (seed, round) like the
cohort; `tracking-clients`, default half of |S^t|, at least 1); broadcast (x, y) and the ids of Y^t.
x^{t+1} = x^t + η_g·mean_S(Δ_i);  y ← y + (1/N)·Σ_{i∈Y^t} Δy_i  (1/N, not 1/|Y|: keeps y = mean_N(y_i) exactly,
also when clients fail, since a client that does not reply has not changed its y_i).
Hyper-parameters: server-lr η_g = 1, tracking-clients Y (paper: 5 of S = 10).
"""

from __future__ import annotations

import numpy as np

from fedsuite.local.adaptive import TRACKING_KEY
from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FAdam(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("y"),)
    sends = ("y",)
    uplink_some = ("delta_y",)  # from the clients in Y^t only

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0, tracking_clients: int = 0):
        super().__init__(settings)
        self.server_lr, self.tracking_clients = server_lr, tracking_clients

    def tracking(self, server_round: int) -> list[int]:
        sampler = self.settings.sampler
        return sampler.tracking(server_round, sampler.cohort(server_round), self.tracking_clients)

    def fit_config(self, server_round: int):
        return {TRACKING_KEY: ",".join(str(pid) for pid in self.tracking(server_round))}

    def expected_uplink(self, server_round: int, partition_id: int) -> tuple[str, ...]:
        return ("delta", "delta_y") if partition_id in self.tracking(server_round) else ("delta",)

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        change = sum((r.arrays["delta_y"] for r in replies if "delta_y" in r.arrays), self.vectors.zeros(self.dim))
        self.y = self.y + change / self.num_clients
        return self.x + self.server_lr * self.cohort_mean(replies, "delta")
