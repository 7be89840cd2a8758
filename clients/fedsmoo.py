"""FedSMOO client (Sun, Shen, Chen, Ding, Tao, ICML 2023; docs/algorithms/fedsmoo.md), in the form of the authors'
code (FL-Simulator client/fedsmoo.py, optimizer/DRegSAM.py): FedSpeed's client (FedDyn's dual ĝ_i and prox
μ(x − x^t)) with DRegSAM's point in place of ESAM's,
    g1 = ∇F_i(x; ξ),  a = g1 − ν_i − s,  e = ρ·a/(‖a‖ + 1e-7),  ν_i ← ν_i + e − s
    x ← x − η_l (∇F_i(x + e; ξ) − ĝ_i + μ(x − x^t) + wd·x);   after K steps ĝ_i ← ĝ_i − μ(x_{i,K} − x^t).
ν_i is the client's dynamic dual (the code's `mu`), persistent client state; s is the server's global perturbation
(sent down). Uplink Δ_i and the new ν_i. ρ = 0 makes it exactly FedDyn with α_d = μ.
"""

from __future__ import annotations

from dataclasses import replace

from fedsuite.local.loop import DualRegularisedSharpness, UpdateRule
from fedsuite.rules.declared import Vector

from .feddyn import FedDynClient


class FedSMOOClient(FedDynClient):
    def __init__(self, node, mu: float, rho: float):
        super().__init__(node, mu, "client")
        self.rho = rho

    @classmethod
    def state_specs(cls, cfg):
        return (Vector("dual", "float32"), Vector("nu_i", "float32"))  # ĝ_i, ν_i

    def rule(self, ctx) -> UpdateRule:
        point = DualRegularisedSharpness(self.rho, self.state.get("nu_i").clone(), ctx.down["s"], eps=1e-7)
        return replace(super().rule(ctx), point=point, parts={"perturbation": point})

    def uplink(self, result, rule, ctx):
        up = super().uplink(result, rule, ctx)
        nu = rule.parts["perturbation"].dual
        self.state.set("nu_i", nu)
        return {**up, "nu": nu}
