"""FedDyn client (Acar et al. 2021, Alg. 1; docs/algorithms/feddyn.md), paper form:
    step   x ← x − η_l (g − ∇L_i + α_d(x − x^t) + wd·x)      (−∇L_i clipped with g, the prox term after)
    after  ∇L_i ← ∇L_i − α_d (x_{i,K} − x^t);   uplink Δ_i.
∇L_i is persistent client state (dual_storage='client'), or the server mirrors h_i = −∇L_i/α_d and sends it
down every round (dual_storage='server', code form: +1 d downlink, stateless clients). Same step either way.
"""

from __future__ import annotations

import torch

from fedsuite.local.loop import AddVector, UpdateRule
from fedsuite.rules.client_rule import ClientRule, RoundContext
from fedsuite.rules.declared import Vector


class FedDynClient(ClientRule):
    uploads_start_shift = True  # the server averages the last local models (strategies/feddyn.py)

    def __init__(self, node, alpha: float, dual_storage: str = "client"):
        self.alpha, self.dual_storage = alpha, dual_storage
        super().__init__(node)

    @classmethod
    def state_specs(cls, cfg):
        return (Vector("dual", "float32"),) if cfg["dual-storage"] == "client" else ()

    @property
    def stateful(self) -> bool:
        return self.state is not None

    def dual(self, ctx: RoundContext) -> torch.Tensor:
        """∇L_i (FedSpeed's ĝ_i) at the start of the round."""
        return self.state.get("dual") if self.stateful else ctx.down["h_i"] * -self.alpha

    def step_dual(self, ctx: RoundContext) -> torch.Tensor:
        return self.dual(ctx)

    def prox_centre(self, ctx: RoundContext) -> torch.Tensor | None:
        return None  # x^t

    def rule(self, ctx) -> UpdateRule:
        clipped, unclipped = self.prox_terms(self.alpha, self.prox_centre(ctx))
        return UpdateRule(clipped=(AddVector(self.step_dual(ctx), -1.0), *clipped), unclipped=unclipped)

    def uplink(self, result, rule, ctx):
        delta = result.x - result.x0
        if self.stateful:
            self.state.set("dual", self.dual(ctx) - self.alpha * delta)
        return {"delta": delta}
