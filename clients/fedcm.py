"""FedCM client (Xu et al., Alg. 2; docs/algorithms/fedcm.md): x ← x − η_l (α·g + (1−α)·D + wd·x).

D (gradient-scale client-level momentum) comes from the server; α weighs the *local* gradient (small α =
strong momentum); weight decay is not scaled by α. Stateless: new clients can join any round.
"""

from __future__ import annotations

from fedsuite.local.loop import AddVector, Scale, UpdateRule
from fedsuite.rules.client_rule import ClientRule


class FedCMClient(ClientRule):
    def __init__(self, node, alpha: float = 0.1):
        super().__init__(node)
        self.alpha = alpha

    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(clipped=(Scale(self.alpha), AddVector(ctx.down["D"], 1.0 - self.alpha)))
