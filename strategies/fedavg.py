"""FedAvg server rule (docs/algorithms/fedavg.md): x^{t+1} = x^t + η_g · mean_S(Δ_i); η_g = 1 is plain averaging.

FedProx (docs/algorithms/fedprox.md) uses this server unchanged: its prox term lives in the client.
"""

from __future__ import annotations

import numpy as np

from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedAvg(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0):
        super().__init__(settings)
        self.server_lr = server_lr

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        return self.x + self.server_lr * self.displacement(replies)
