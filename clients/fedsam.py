"""FedSAM and MoFedSAM clients (Qu et al. 2022; docs/algorithms/fedsam.md, mofedsam.md). The gradient is
taken at the SAM point x + ρ·g1/(‖g1‖ + 1e-12) of the same minibatch (g1 = loss gradient only), then:
    FedSAM:   x ← x − η_l (g_s + wd·x)                          server: FedAvg
    MoFedSAM: x ← x − η_l (α g_s + (1−α) D + wd·x)              FedCM's client with the SAM point; server: FedCM
"""

from __future__ import annotations

from dataclasses import replace

from fedsuite.local.loop import SharpnessAware, UpdateRule
from fedsuite.rules.client_rule import ClientRule

from .fedcm import FedCMClient


class FedSAMClient(ClientRule):
    def __init__(self, node, rho: float):
        super().__init__(node)
        self.rho = rho

    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(point=SharpnessAware(self.rho))


class MoFedSAMClient(FedCMClient):
    def __init__(self, node, alpha: float, rho: float):
        super().__init__(node, alpha)
        self.rho = rho

    def rule(self, ctx) -> UpdateRule:
        return replace(super().rule(ctx), point=SharpnessAware(self.rho))
