"""FedGAMMA client (Dai et al., IEEE TNNLS 2023; docs/algorithms/fedgamma.md), in the form of the authors' code
(FL-Simulator client/fedgamma.py): SCAFFOLD's client with the gradient taken at ESAM's normalised ascent point of
the same minibatch,
    g1 = ∇F_i(x; ξ),  x̆ = x + ρ·g1/(‖g1‖ + 1e-7),  x ← x − η_l (∇F_i(x̆; ξ) − c_i + c + wd·x)
with the correction c − c_i clipped together with the SAM gradient. After K_i steps, option II:
    c_i⁺ = c_i − c + (x^t − x_{i,K}) / (K_i η_l);   uplink Δ_i and Δc_i.   Server: SCAFFOLD's. ρ = 0 is SCAFFOLD.
"""

from __future__ import annotations

from dataclasses import replace

from fedsuite.local.loop import SharpnessAware, UpdateRule

from .scaffold import ScaffoldClient


class FedGammaClient(ScaffoldClient):
    def __init__(self, node, rho: float):
        super().__init__(node, option=2)
        self.rho = rho

    def rule(self, ctx) -> UpdateRule:
        return replace(super().rule(ctx), point=SharpnessAware(self.rho, eps=1e-7))
