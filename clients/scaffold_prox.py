"""SCAFFOLD-Prox client (LoSAC paper §V-E; docs/algorithms/scaffold-prox.md): SCAFFOLD's corrected step
followed by the same proximal step as LoSAC-Prox, x ← prox_{η_l Ψ}(x); control variates as SCAFFOLD's."""

from __future__ import annotations

from clients.scaffold import ScaffoldClient
from fedsuite.variance import proximal_stage


class ScaffoldProxClient(ScaffoldClient):
    def rule(self, down, config):
        rule = super().rule(down, config)
        rule.proximal = (proximal_stage(self.node.cfg, self.node.model.module),)
        return rule
