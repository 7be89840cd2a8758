"""FedSpeed-Ing client (FedSpeed thesis Alg. 3, our reading in docs/algorithms/fedspeed-ing.md): FedSpeed with
    prox centre x̃^t = x^t + ζ(x^t − x^{t−1}) (sent by the server) and the extrapolated correction ǧ_i:
    x ← x − η_l (g̃ − ǧ_i + μ(x − x̃^t) + wd·x)
    after: ĝ_i⁺ = ĝ_i − μ(x_{i,K} − x^t),  ǧ_i⁺ = ĝ_i⁺ + ζ(ĝ_i⁺ − ĝ_i);  the upload uses ĝ_i⁺ (not ǧ).
ĝ_i and ǧ_i are client state (2d); absent clients keep both.
"""

from __future__ import annotations

from fedsuite.rules.declared import Vector

from .fedspeed import FedSpeedClient


class FedSpeedIngClient(FedSpeedClient):
    def __init__(self, node, mu: float, rho: float, zeta: float, mix: float = 1.0, dual_agg: str = "all"):
        super().__init__(node, mu, rho, mix, "client", dual_agg)
        self.zeta = zeta

    @classmethod
    def state_specs(cls, cfg):
        return (Vector("dual", "float32"), Vector("dual_extrapolated", "float32"))  # ĝ_i, ǧ_i

    def step_dual(self, ctx):
        return self.state.get("dual_extrapolated")

    def prox_centre(self, ctx):
        return ctx.down["x_tilde"]

    def uplink(self, result, rule, ctx):
        before = self.state.get("dual").clone()
        up = super().uplink(result, rule, ctx)
        after = self.state.get("dual")
        self.state.set("dual_extrapolated", after + self.zeta * (after - before))
        return up
