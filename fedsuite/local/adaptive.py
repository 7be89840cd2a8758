"""Stages of the shared local loop (`fedsuite.local.loop.train_local`) for the adaptive family and MimeSVRG.

- `AdamStep` is a *step* stage (docs/algorithms/fadamet.md): u = m/(√v̂ + ε) with the AMSGrad max v̂ = max(v̂, v), no
  bias correction, m = 0 at the start of every round, v (and v̂) starting from the carried v_i (LocalAdam,
  FAdamET/GT) or the server's v̄ (FedLADA). Corrections placed before it (FAdamGT's y − y_i) enter the moments;
  `after_step` transforms (FAdamET's y − y_i, FedLADA's α/(1 − α) mix) edit the move u it returns.
- `GradientSum` is a correction that changes nothing but records Σ_k (g_k + wd·x_k), the raw gradients FAdamGT
  uploads as its new tracking term (1/K) Σ_k g_k.
- `ControlVariatePoint` is a gradient point: g(x; ξ) − g(x^t; ξ) on the same minibatch (Mime's SVRG term,
  docs/algorithms/mimesvrg.md).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fedsuite.local.loop import StepContext
from fedsuite.models.networks import FlatModel

TRACKING_KEY = "tracking"  # fit-config key: comma-separated partition ids of Y^t (docs/algorithms/fadamet.md)
# MimeSVRG's query (docs/algorithms/mimesvrg.md): its phase, and the array that answers it, ∇F_i(x^t)
GRADIENT_PHASE = "full-gradient"
GRADIENT_NAME = "full_grad"


class AdamStep:
    """AMSGrad without bias correction on the direction d; `v` is the final second moment after the round."""

    def __init__(self, v: torch.Tensor, beta1: float, beta2: float, eps: float):
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.m = torch.zeros_like(v)
        self.v = v.clone()
        self.vhat = v.clone()  # [decision] (docs/algorithms/fadamet.md): v̂ starts each round at the carried v
        self._u = torch.empty_like(v)

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        self.m.mul_(self.beta1).add_(d, alpha=1.0 - self.beta1)
        self.v.mul_(self.beta2).addcmul_(d, d, value=1.0 - self.beta2)
        torch.maximum(self.vhat, self.v, out=self.vhat)
        torch.sqrt(self.vhat, out=self._u).add_(self.eps)
        return torch.div(self.m, self._u, out=self._u)


class GradientSum:
    """Records Σ_k (d + wd·x_k) where it sits in the corrections (first: the raw loss gradient); d is unchanged."""

    def __init__(self, weight_decay: float):
        self.weight_decay = weight_decay
        self.total: torch.Tensor | None = None
        self.count = 0

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> None:
        if self.total is None:
            self.total = torch.zeros_like(d)
        self.total.add_(d)
        if self.weight_decay:
            self.total.add_(ctx.x, alpha=self.weight_decay)
        self.count += 1

    def mean(self) -> torch.Tensor:
        if self.total is None:
            raise RuntimeError("no local step was taken")
        return self.total / self.count


class ControlVariatePoint:
    """Gradient g(x; ξ) − g(anchor; ξ), both on the same minibatch; x is restored by copy, bit for bit."""

    def __init__(self, anchor: torch.Tensor):
        self.anchor = anchor
        self._saved: torch.Tensor | None = None
        self._g: torch.Tensor | None = None

    def __call__(self, model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = model.loss_and_grad(loss_fn, inputs, targets)
        if self._saved is None:
            self._saved, self._g = torch.empty_like(model.x), torch.empty_like(model.x)
        self._saved.copy_(model.x)
        self._g.copy_(model.grad)
        model.x.copy_(self.anchor)
        model.loss_and_grad(loss_fn, inputs, targets)
        model.x.copy_(self._saved)
        model.grad.neg_().add_(self._g)
        return loss


def tracks(config: Mapping, partition_id: int) -> bool:
    """Whether this client is in the round's tracking subset Y^t (sent by the server in the fit config)."""
    members = str(config.get(TRACKING_KEY, ""))
    return str(partition_id) in members.split(",") if members else False
