"""MimeSVRG server (docs/algorithms/mimesvrg.md): a round with two exchanges.

Before the round's training the sampled clients answer a query (`Query`, see `fedsuite.clients.mimesvrg`) with
∇F_i(x^t); the valid answers give c = mean_S(∇F_i(x^t)) (uniform, or by n_i with weighting='samples' as fedjax
does). Then the ordinary fit exchange with (x^t, c); x^{t+1} = x^t + η_g·mean_S(Δ_i). A client whose answer fails
or is rejected gets no fit message and counts as a failure of the round. The adapter counts both exchanges in the
round's figures (+1 d down, +1 d up per client, the query's compute time and wall time).
Hyper-parameters: server-lr η_g = 1.
"""

from __future__ import annotations

import numpy as np

from fedsuite.local.adaptive import GRADIENT_NAME, GRADIENT_PHASE
from fedsuite.rules.declared import Vector
from fedsuite.rules.server_rule import Answer, Query, Reply, RuleSettings, ServerRule


class MimeSVRG(ServerRule):
    state = (Vector("c"),)
    sends = ("c",)
    query = Query(phase=GRADIENT_PHASE, answer=GRADIENT_NAME)

    def __init__(self, settings: RuleSettings, server_lr: float = 1.0):
        super().__init__(settings)
        self.server_lr = server_lr

    def answered(self, server_round: int, answers: dict[int, Answer]) -> None:
        if answers:
            w = np.array([a.num_examples if self.settings.weighting == "samples" else 1.0 for a in answers.values()])
            self.c = sum(wi * a.vector for wi, a in zip(w / w.sum(), answers.values(), strict=True))

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        return self.x + self.server_lr * self.displacement(replies)
