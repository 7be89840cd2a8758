"""FAdamET client (FAdamET paper, Alg. 1, error tracking; docs/algorithms/fadamet.md).

The tracking correction y − y_i is an `after_step` transform: it is added to the Adam move, *after* the moments,
u = m/(√v̂ + ε) + y − y_i, x ← x − η_l·u (so it is not clipped). Clients in Y^t set
y_i_new = y_i − y + (x^t − x_{i,K})/(K_i·η_l) (= mean_k of the Adam moves) and upload Δy_i = y_i_new − y_i;
the others keep y_i. v_i persists for every sampled client (LocalAdam). Hyper-parameters as LocalAdam.
"""

from __future__ import annotations

from fedsuite.local.loop import AddVector, UpdateRule
from fedsuite.rules.declared import Vector

from .localadam import LocalAdamClient


class FAdamETClient(LocalAdamClient):
    @classmethod
    def state_specs(cls, cfg):
        return (Vector("v_i", "float32"), Vector("y_i", "float32"))

    def rule(self, ctx) -> UpdateRule:
        correction = AddVector(ctx.down["y"] - self.state.get("y_i"))
        return UpdateRule(step=self.adam_step(), after_step=(correction,))

    def uplink(self, result, rule, ctx):
        uplink = super().uplink(result, rule, ctx)
        if ctx.tracked:
            y_i = self.state.get("y_i")
            y_new = y_i - ctx.down["y"] - uplink["delta"] / (result.steps * ctx.lr)
            uplink["delta_y"] = y_new - y_i
            self.state.set("y_i", y_new)
        return uplink
