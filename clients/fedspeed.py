"""FedSpeed client (FedSpeed thesis Alg. 2, §4; docs/algorithms/fedspeed.md): FedDyn's correction and prox with
μ = 1/λ in place of α_d, and the gradient taken at the normalised SAM ascent point:
    g1 = ∇F_i(x; ξ),  x̆ = x + ρ0·g1/(‖g1‖ + 1e-7),  g̃ = (1−α)·g1 + α·∇F_i(x̆; ξ)
    x ← x − η_l (g̃ − ĝ_i + μ(x − x^t) + wd·x);   after K steps ĝ_i ← ĝ_i − μ(x_{i,K} − x^t).
Uplink Δ_i (code form, dual_agg='all'), or the thesis' x̂_i = x_{i,K} − λ·ĝ_i as Δ̂_i = Δ_i − ĝ_i/μ
(dual_agg='sampled' with client-held duals). ρ0 = 0 makes it exactly FedDyn.
"""

from __future__ import annotations

from dataclasses import replace

from fedsuite.local.loop import SharpnessAware, UpdateRule

from .feddyn import FedDynClient


class FedSpeedClient(FedDynClient):
    def __init__(
        self, node, mu: float, rho: float, mix: float = 1.0, dual_storage: str = "client", dual_agg: str = "all"
    ):
        super().__init__(node, mu, dual_storage)
        self.rho, self.mix, self.dual_agg = rho, mix, dual_agg

    def rule(self, ctx) -> UpdateRule:
        return replace(super().rule(ctx), point=SharpnessAware(self.rho, self.mix, eps=1e-7))

    def uplink(self, result, rule, ctx):
        up = super().uplink(result, rule, ctx)
        if self.dual_agg == "sampled" and self.stateful:
            return {"delta_hat": up["delta"] - self.state.get("dual") / self.alpha}
        return up
