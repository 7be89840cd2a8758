"""FAdamGT client (FAdamET paper, Alg. 1, gradient tracking; ALGORITHMS.md §3.5).

The tracking correction y − y_i is a `corrections` transform: it is added to the gradient *before* the Adam
moments (and is clipped with it), ĝ = g + y − y_i, u = m/(√v̂ + ε), x ← x − η_l·u. Clients in Y^t set
y_i_new = (1/K_i) Σ_k g_k (raw gradients + wd·x_k, recorded before the correction) and upload Δy_i = y_i_new − y_i;
the others keep y_i. v_i persists for every sampled client (LocalAdam). Hyper-parameters as LocalAdam.
"""

from __future__ import annotations

from clients.localadam import LocalAdamClient
from fedsuite.adaptive import GradientSum, tracks
from fedsuite.local import AddVector, UpdateRule


class FAdamGTClient(LocalAdamClient):
    def rule(self, down, config) -> UpdateRule:
        self.gradients = GradientSum(float(self.node.cfg["weight-decay"]))
        correction = AddVector(down["y"] - self.state.get("y_i"))
        return UpdateRule(corrections=(self.gradients, correction), step=self.adam_step())

    def uplink(self, result, down, config):
        uplink = super().uplink(result, down, config)
        if tracks(config, self.node.partition_id):
            y_new = self.gradients.mean()
            uplink["delta_y"] = y_new - self.state.get("y_i")
            self.state.set("y_i", y_new)
        return uplink
