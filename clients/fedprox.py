"""FedProx client (docs/algorithms/fedprox.md): x ← x − η_l (g + μ(x − x^t) + wd·x); uplink Δ_i.

μ multiplies (μ/2)‖x − x^t‖², so the gradient term is μ(x − x^t); it is added after clipping
(clipping: docs/algorithms/index.md).
"""

from __future__ import annotations

from fedsuite.local.loop import UpdateRule
from fedsuite.node.holdings import ClientNode
from fedsuite.rules.client_rule import ClientRule


class FedProxClient(ClientRule):
    def __init__(self, node: ClientNode, mu: float):
        super().__init__(node)
        self.mu = mu

    def rule(self, ctx) -> UpdateRule:
        clipped, unclipped = self.prox_terms(self.mu)
        return UpdateRule(clipped=clipped, unclipped=unclipped)
