"""The kit's federations (`dataset='synthetic-lsq'`): LSQ and PARTIAL, and `least_squares`, their clients' data in
float64 with the closed-form optimum x* (fedsuite.testing.kit describes them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from fedsuite.config.run_config import resolve

LSQ: dict[str, Any] = {
    "dataset": "synthetic-lsq",
    "num-clients": 5,
    "clients-per-round": 5,
    "synthetic-dim": 4,
    "synthetic-samples": 20,
    "synthetic-heterogeneity": 1.0,
    "batch-size": 0,
    "local-steps": 10,
    "lr": 0.05,
    "num-server-rounds": 20,
    "eval-every": 1,
}
PARTIAL: dict[str, Any] = {
    **LSQ,
    "num-clients": 6,
    "clients-per-round": 3,
    "synthetic-dim": 5,
    "synthetic-samples": 12,
    "batch-size": 4,
    "local-steps": 3,
    "lr": 0.02,
    "weight-decay": 0.01,
    "num-server-rounds": 5,
    "eval-every": 1000,
}


@dataclass(frozen=True)
class LeastSquares:
    clients: list[tuple[np.ndarray, np.ndarray]]  # (A_i, b_i), float64
    weight_decay: float

    @cached_property
    def x_star(self) -> np.ndarray:
        """argmin mean_i (1/2n_i)‖A_i x − b_i‖² + (wd/2)‖x‖², from the normal equations."""
        dim = self.clients[0][0].shape[1]
        hessian = np.mean([a.T @ a / len(b) for a, b in self.clients], axis=0) + self.weight_decay * np.eye(dim)
        return np.linalg.solve(hessian, np.mean([a.T @ b / len(b) for a, b in self.clients], axis=0))

    def relative_error(self, x: np.ndarray) -> float:
        return float(np.linalg.norm(np.asarray(x, np.float64) - self.x_star) / np.linalg.norm(self.x_star))


def least_squares(run_config: Mapping[str, Any] | None = None) -> LeastSquares:
    """The federation `run_config` (default LSQ) trains on, as numpy data."""
    from fedsuite.data import load_dataset

    cfg = resolve({**LSQ, **(run_config or {})})
    fed = load_dataset(cfg)
    clients = [
        (np.asarray(fed.features_x[p], np.float64), np.asarray(fed.targets[p], np.float64)) for p in fed.client_parts
    ]
    return LeastSquares(clients, float(cfg["weight-decay"]))
