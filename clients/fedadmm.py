"""FedADMM clients (docs/algorithms/fedadmm.md). Both take x ← x − η_l (g + λ_i + ρ(x − x^t) + wd·x) from x^t and then
λ_i⁺ = λ_i + ρ(x_{i,K} − x^t); λ_i is persistent client state. They differ in what goes up:
    variant 'wang' (consensus ADMM, default): the client also keeps its augmented model x̂_i = x_{i,K} + λ_i/ρ
        (x̂_i = x^0 before its first round) and uploads Δx̂_i = x̂_i⁺ − x̂_i;
    variant 'gong': uplink u_i = (x_{i,K} − x^t) + (λ_i⁺ − λ_i)/ρ.
"""

from __future__ import annotations

from fedsuite.local.loop import AddVector, UpdateRule
from fedsuite.rules.client_rule import ClientRule
from fedsuite.rules.declared import Vector


class FedADMMClient(ClientRule):
    @classmethod
    def state_specs(cls, cfg):
        lam = Vector("lambda", "float32")
        return (lam, Vector("xhat", "float32")) if cfg["fedadmm-variant"] == "wang" else (lam,)

    def __init__(self, node, rho: float, variant: str = "wang"):
        super().__init__(node)
        self.rho, self.variant = rho, variant

    def rule(self, ctx) -> UpdateRule:
        clipped, unclipped = self.prox_terms(self.rho)
        return UpdateRule(clipped=(AddVector(self.state.get("lambda"), 1.0), *clipped), unclipped=unclipped)

    def uplink(self, result, rule, ctx):
        delta = result.x - result.x0
        lam = self.state.get("lambda")
        lam_new = lam + self.rho * delta
        self.state.set("lambda", lam_new)
        if self.variant == "gong":
            return {"u": delta + (lam_new - lam) / self.rho}
        xhat = self.state.get("xhat") if self.state.has("xhat") else self.node.initial_x()
        xhat_new = result.x + lam_new / self.rho
        self.state.set("xhat", xhat_new)
        return {"delta_xhat": xhat_new - xhat}
