"""FedExP server rule (Jhunjhunwala, Wang, Joshi, ICLR 2023; docs/algorithms/fedexp.md): clients run FedAvg's local
SGD; the server extrapolates the mean displacement with an adaptive step size
    η_g^t = max(1, mean_S ‖Δ_i‖² / (2 (‖Δ̄‖² + |S| ε_t))),   Δ̄ = mean_S Δ_i,   x^{t+1} = x^t + η_g^t Δ̄,
both means with the cohort weights (`weighting`), ε_t = ε γ^{2(t−1)} decaying with the square of the lr decay, as
in the authors' code. With η_g^t = 1 (ε huge) it is FedAvg bit for bit.

With eval_average (the authors' reporting) the server evaluates (x^{t+1} + x^t)/2, the mean of the last two
iterates, while training continues from x^{t+1}; after the first round it evaluates x^1 itself, as their code does.
x^t is declared state then, so a resumed run evaluates as the uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedExP(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def __init__(self, settings: RuleSettings, eps: float = 1e-3, eval_average: bool = True):
        self.eps, self.eval_average = eps, eval_average
        super().__init__(settings)
        if eval_average:
            self.x_prev = self.vectors.copy(
                self.x
            )  # before the first round both iterates are x^0: round 0 evaluates x^0
        self.step_size: float | None = None  # η_g^t of the round just aggregated, for its row

    def state_specs(self):
        return (Vector("x_prev", "float32"),) if self.eval_average else ()

    def epsilon(self, server_round: int) -> float:
        """ε_t = ε γ^{2(t−1)}: ε shrinks with the square of the local step size η_l^t = η_l γ^{t−1}."""
        return self.eps * self.settings.lr_decay ** (2 * (server_round - 1))

    def mean_squared_norm(self, replies: Sequence[Reply]) -> float:
        """mean_S ‖Δ_i‖², with the weights of `cohort_mean` (uniform, or n_i under weighting='samples')."""
        norms = [self.vectors.dot(d, d) for d in (r.arrays["delta"] for r in replies)]
        return float(np.dot(self.cohort_weights(replies), norms))

    def server_step(self, server_round: int, replies: Sequence[Reply], mean: np.ndarray) -> float:
        """η_g^t = max(1, mean_S ‖Δ_i‖² / (2 (‖Δ̄‖² + |S| ε_t)))."""
        denominator = 2.0 * (self.vectors.dot(mean, mean) + self.cohort_size(replies) * self.epsilon(server_round))
        return max(1.0, self.mean_squared_norm(replies) / denominator)

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        mean = self.cohort_mean(replies, "delta")
        self.step_size = self.server_step(server_round, replies, mean)
        new_x = self.x + self.step_size * mean
        if self.eval_average:  # the iterate before x^{t+1}; none before x^1, which is then evaluated alone
            self.x_prev = self.vectors.narrow(new_x) if server_round == 1 else self.vectors.copy(self.x)
        return new_x

    def empty_round(self, server_round: int) -> None:
        if self.eval_average:  # x^{t+1} = x^t: both of the last two iterates are x^t
            self.x_prev = self.vectors.copy(self.x)
        self.step_size = None

    def evaluation_model(self) -> np.ndarray:
        if not self.eval_average:
            return self.x
        return self.vectors.narrow(0.5 * (self.vectors.wide(self.x) + self.x_prev))

    def round_figures(self, server_round: int) -> dict[str, float]:
        return {} if self.step_size is None else {"server_lr": self.step_size}
