"""SCAFFOLD client (Karimireddy et al. 2020, Alg. 1; docs/algorithms/scaffold.md).

Step x ← x − η_l (g − c_i + c + wd·x) with the correction clipped together with g (clipping:
docs/algorithms/index.md). After K_i steps:
    option II: c_i⁺ = c_i − c + (x^t − x_{i,K}) / (K_i η_l)      (η_l of this round, K_i actually taken)
    option I:  c_i⁺ = ∇F_i(x^t) + wd·x^t over the whole local dataset (one extra pass)
Uplink Δ_i and Δc_i = c_i⁺ − c_i; c_i is persistent client state (zeros on first participation).
"""

from __future__ import annotations

from fedsuite.local.loop import AddVector, UpdateRule, full_gradient
from fedsuite.rules.client_rule import ClientRule
from fedsuite.rules.declared import Vector


class ScaffoldClient(ClientRule):
    @classmethod
    def state_specs(cls, cfg):
        return (Vector("c_i", "float32"),)

    def __init__(self, node, option: int = 2):
        super().__init__(node)
        self.option = option

    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(clipped=(AddVector(ctx.down["c"] - self.state.get("c_i")),))

    def uplink(self, result, rule, ctx):
        delta = result.x - result.x0  # taken first: option I reuses the model's live vector
        c_i, c = self.state.get("c_i"), ctx.down["c"]
        if self.option == 2:
            c_new = c_i - c - delta / (result.steps * ctx.lr)
        else:
            node = self.node
            c_new = full_gradient(node.model, result.x0, node.data, node.loss_fn)
            c_new.add_(result.x0, alpha=node.cfg.local.weight_decay)
        self.state.set("c_i", c_new)
        return {"delta": delta, "delta_c": c_new - c_i}
