"""FedMIM client (Liu et al., Alg. 1 l.8–12; docs/algorithms/fedmim.md):
    g = ∇F_i(x − b_t; ξ)                         gradient at the look-ahead point
    x ← x − a_t − η_l (A·g + wd·x)               inertial move along recent global descent, A = 1 − Σα_j
a_t, b_t come from the server; weight decay is not scaled by A. Stateless client.
"""

from __future__ import annotations

from fedsuite.local.loop import AddVector, LookAhead, Scale, UpdateRule
from fedsuite.rules.client_rule import ClientRule


class FedMIMClient(ClientRule):
    def __init__(self, node, alphas: tuple[float, ...], betas: tuple[float, ...]):
        super().__init__(node)
        self.scale = 1.0 - sum(alphas)

    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(
            point=LookAhead(ctx.down["b"]),
            clipped=(Scale(self.scale),),
            # a_t is a displacement: dividing by η_l makes η_l·d move x by exactly a_t
            unclipped=(AddVector(ctx.down["a"], 1.0 / ctx.lr),),
        )
