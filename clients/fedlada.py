"""FedLADA client (Sun et al., TPAMI 2023, as reconstructed in docs/algorithms/fedlada.md [verify]).

Adam stage as LocalAdam (m = 0 every round, AMSGrad max, no bias correction) but v and v̂ start from the
server's averaged second moment v̄; the move mixes the local Adam direction with the server's global direction
g_a as `after_step` transforms: x ← x − η_l·(α·m/(√v̂ + ε) + (1 − α)·g_a). Stateless. Uplink Δ_i and the final v.
Hyper-parameters: fedlada-alpha α = 0.1 [decision], adam-beta1/-beta2/-eps, η_l = 1e-3.
"""

from __future__ import annotations

from fedsuite.local.adaptive import AdamStep
from fedsuite.local.loop import AddVector, Scale, UpdateRule
from fedsuite.rules.client_rule import ClientRule


class FedLADAClient(ClientRule):
    def __init__(self, node, alpha: float = 0.1, beta1: float = 0.9, beta2: float = 0.99, eps: float = 1e-8):
        super().__init__(node)
        self.alpha, self.beta1, self.beta2, self.eps = alpha, beta1, beta2, eps

    def rule(self, ctx) -> UpdateRule:
        adam = AdamStep(ctx.down["v"], self.beta1, self.beta2, self.eps)
        return UpdateRule(step=adam, after_step=(Scale(self.alpha), AddVector(ctx.down["g_a"], 1.0 - self.alpha)))

    def uplink(self, result, rule, ctx):
        return {"delta": result.x - result.x0, "v": rule.step.v}
