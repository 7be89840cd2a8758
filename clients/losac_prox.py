"""LoSAC-Prox client (LoSAC paper, eq. 16; docs/algorithms/losac-prox.md): LoSAC's step followed by x ← prox_{η_l Ψ}(x),
Ψ = λ‖x‖₁ or λ‖X‖_* (`prox-penalty`, `prox-lambda`). The server averages the proximal outputs (no server prox)."""

from __future__ import annotations

from clients.losac import LoSACClient
from fedsuite.variance import proximal_stage


class LoSACProxClient(LoSACClient):
    def rule(self, down, config):
        rule = super().rule(down, config)
        rule.proximal = (proximal_stage(self.node.cfg, self.node.model.module),)
        return rule
