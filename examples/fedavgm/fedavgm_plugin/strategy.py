"""FedAvgM with Nesterov server momentum, a subclass of the built-in FedAvgM (fedsuite.strategies.fedavgm): after
v's update v ← β v + mean_S(Δ_i), the server moves by the look-ahead β v + mean_S(Δ_i) instead of v,
    x ← x + η_g (β v + mean_S(Δ_i)).
β = 0 is FedAvg bit for bit. The momentum v stays the built-in's declared state, so checkpoints, resume and the
registry's tables cover it without more code.
"""

from __future__ import annotations

import numpy as np
from fedsuite.strategies.fedavgm import FedAvgM


class FedAvgMNesterov(FedAvgM):
    def direction(self, mean: np.ndarray) -> np.ndarray:
        return self.beta * self.v + mean
