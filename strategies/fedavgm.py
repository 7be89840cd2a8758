"""FedAvgM server rule (Hsu, Qi, Brown 2019, server momentum; docs/algorithms/fedavgm.md): clients run FedAvg's
local SGD; the server keeps a momentum v of the mean displacement,
    v^{t+1} = β v^t + mean_S(Δ_i),   x^{t+1} = x^t + η_g v^{t+1},   v^0 = 0,
the convention of Flower's own FedAvgM and of the FedExP authors' code. β = 0 is FedAvg bit for bit.

`direction` is the move η_g multiplies: a subclass changes it alone (examples/fedavgm: Nesterov's β v + mean_S Δ_i).
"""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedAvgM(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)
    state = (Vector("v"),)

    def __init__(self, settings: RuleSettings, beta: float = 0.9, server_lr: float = 1.0):
        super().__init__(settings)
        self.beta = beta
        self.server_lr = server_lr

    def direction(self, mean: np.ndarray) -> np.ndarray:
        """The server's move before η_g, after v's update: the momentum itself."""
        return self.v

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        mean = self.displacement(replies)
        self.v = self.beta * self.v + mean
        return self.x + self.server_lr * self.direction(mean)
