"""The proximal step of the LoSAC paper's -Prox variants (docs/algorithms/losac-prox.md): after every local step,
x ← prox_{η_l Ψ}(x) with Ψ = λ‖x‖₁ or λ‖X‖_* (`prox-penalty`, `prox-lambda`). Mixed into a client before its
base class, it adds the step to whatever rule the base builds; the server averages the proximal outputs."""

from __future__ import annotations

from fedsuite.local.variance import proximal_stage


class ProximalStep:
    def rule(self, ctx):
        rule = super().rule(ctx)
        rule.proximal = (proximal_stage(self.node.cfg, self.node.model.module),)
        return rule
