"""MimeSVRG client (Karimireddy et al., Mime with SGD base and the SVRG control variate; docs/algorithms/mimesvrg.md).

Two messages per round:
- phase A, the server query `GRADIENT_PHASE` (`answer`): return ∇F_i(x^t), the mean-loss gradient over the whole
  local dataset (one pass, no augmentation, no weight decay), as the single array `GRADIENT_NAME`. This upload is
  what the LoSAC paper's DLG study attacks (docs/dlg/index.md).
- phase B (a normal fit): K_i steps x ← x − η_l·(g(x; ξ) − g(x^t; ξ) + c + wd·x), both gradients on the same
  minibatch, c = the server's mean of the phase-A gradients; uplink Δ_i. Stateless.
The names both halves use are fedsuite.local.adaptive's.
"""

from __future__ import annotations

from fedsuite.local.adaptive import GRADIENT_NAME, GRADIENT_PHASE, ControlVariatePoint
from fedsuite.local.loop import AddVector, UpdateRule, full_gradient
from fedsuite.rules.client_rule import ClientRule


class MimeSVRGClient(ClientRule):
    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(point=ControlVariatePoint(ctx.down["model"]), clipped=(AddVector(ctx.down["c"]),))

    def answer(self, ctx):
        if ctx.phase != GRADIENT_PHASE:
            return None
        node = self.node
        return {GRADIENT_NAME: full_gradient(node.model, ctx.down["model"], node.data, node.loss_fn)}
