"""FAdamGT client (FAdamET paper, Alg. 1, gradient tracking; docs/algorithms/fadamgt.md).

The tracking correction y − y_i is a `corrections` transform: it is added to the gradient *before* the Adam
moments (and is clipped with it), ĝ = g + y − y_i, u = m/(√v̂ + ε), x ← x − η_l·u. Clients in Y^t set
y_i_new = (1/K_i) Σ_k g_k (raw gradients + wd·x_k, recorded before the correction) and upload Δy_i = y_i_new − y_i;
the others keep y_i. v_i persists for every sampled client (LocalAdam). Hyper-parameters as LocalAdam.
"""

from __future__ import annotations

from fedsuite.local.adaptive import GradientSum
from fedsuite.local.loop import AddVector, UpdateRule

from .fadamet import FAdamETClient
from .localadam import LocalAdamClient


class FAdamGTClient(LocalAdamClient):
    state_specs = FAdamETClient.state_specs  # v_i and y_i

    def rule(self, ctx) -> UpdateRule:
        gradients = GradientSum(self.node.cfg.local.weight_decay)
        correction = AddVector(ctx.down["y"] - self.state.get("y_i"))
        return UpdateRule(clipped=(gradients, correction), step=self.adam_step(), parts={"gradients": gradients})

    def uplink(self, result, rule, ctx):
        uplink = super().uplink(result, rule, ctx)
        if ctx.tracked:
            y_new = rule.parts["gradients"].mean()
            uplink["delta_y"] = y_new - self.state.get("y_i")
            self.state.set("y_i", y_new)
        return uplink
