"""LocalAdam client (baseline of the FAdamET paper; docs/algorithms/localadam.md; FAdamET's step with y ≡ 0).

Step: d = g (+ wd·x, clipped as for every algorithm), then the Adam stage u = m/(√v̂ + ε) with the AMSGrad max,
no bias correction, m = 0 every round, v starting from this client's persistent v_i; x ← x − η_l·u.
After K_i steps v_i ← v (client state, also for clients that are not in the tracking subset). Uplink Δ_i.
Hyper-parameters: adam-beta1 β1 = 0.9, adam-beta2 β2 = 0.99, adam-eps ε = 1e-8, lr η_l = 1e-3 in the paper.
"""

from __future__ import annotations

from fedsuite.local.adaptive import AdamStep
from fedsuite.local.loop import UpdateRule
from fedsuite.rules.client_rule import ClientRule
from fedsuite.rules.declared import Vector


class LocalAdamClient(ClientRule):
    def __init__(self, node, beta1: float = 0.9, beta2: float = 0.99, eps: float = 1e-8):
        super().__init__(node)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    @classmethod
    def state_specs(cls, cfg):
        return (Vector("v_i", "float32"),)

    def adam_step(self) -> AdamStep:
        """This round's Adam stage, starting from the carried v_i."""
        return AdamStep(self.state.get("v_i"), self.beta1, self.beta2, self.eps)

    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(step=self.adam_step())

    def uplink(self, result, rule, ctx):
        self.state.set("v_i", rule.step.v)  # the round's final second moment
        return {"delta": result.x - result.x0}
