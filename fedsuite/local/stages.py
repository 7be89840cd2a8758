"""The composable stages of a local step's update rule (fedsuite/local/loop.py's module docstring shows where each
sits in the step): the gradient points (plain, SAM, look-ahead, FedSMOO's dual-regularised SAM), the transforms that
add to the direction (the prox term, fixed linear corrections, scaling), the default step, and `StepContext`, what
every stage is called with. Every stage works on one client's (d,) vectors and on a cohort's stacked (C, d) rows
alike (norms are per row, `row_norm`), so fedsuite/batched/ runs the same stages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fedsuite.models.networks import FlatModel

# A transform edits the direction `d` in place, given the live iterate and the round's start point.
Transform = Callable[[torch.Tensor, "StepContext"], None]

# A step turns the direction d into the move u (x ← x − η_l·u); it may return d itself (SGD).
Step = Callable[[torch.Tensor, "StepContext"], torch.Tensor]
# A proximal operator maps x in place after the move, given the step's η_l.
ProximalOp = Callable[[torch.Tensor, float, "StepContext"], None]


def row_norm(v: torch.Tensor) -> torch.Tensor:
    """The L2 norm of one client's vector (d,) as a 0-d tensor, or of each row of a stacked (C, d) matrix as (C, 1)."""
    return v.norm() if v.dim() == 1 else v.norm(dim=-1, keepdim=True)


@dataclass
class StepContext:
    """What every stage of a local step is called with, one object per round updated before each step: the live
    iterate, the round's start (x^t, or x_{i,0} under relaxed-init), the step k, η_l and the step's fixed block
    (docs/own/algorithm.md, "A step stage with persistent state")."""

    x: torch.Tensor  # live flat parameters x_{i,k}
    x0: torch.Tensor  # round start x^t
    step: int = 0
    lr: float = 0.0  # η_l of this round
    block: int | None = None  # the fixed data block this step's minibatch came from (block sources only)


class AtIterate:
    """Gradient at x itself (plain SGD point)."""

    def __call__(self, model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return model.loss_and_grad(loss_fn, inputs, targets)


class SharpnessAware:
    """Gradient at the SAM ascent point x + ρ0·g1/(‖g1‖ + eps), same minibatch (docs/algorithms/fedsam.md, fedspeed.md).

    g1 is the loss gradient only (no weight decay or corrections). `mix` = α of FedSpeed: the returned gradient
    is (1−α)·g1 + α·g2 (α = 1: plain SAM). x is restored by copy, bit for bit.
    """

    def __init__(self, rho: float, mix: float = 1.0, eps: float = 1e-12):
        self.rho, self.mix, self.eps = rho, mix, eps
        self._saved: torch.Tensor | None = None
        self._g1: torch.Tensor | None = None

    def __call__(self, model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = model.loss_and_grad(loss_fn, inputs, targets)
        if self._saved is None:
            self._saved = torch.empty_like(model.x)
            self._g1 = torch.empty_like(model.x) if self.mix != 1.0 else None
        self._saved.copy_(model.x)
        if self._g1 is not None:
            self._g1.copy_(model.grad)
        model.x.addcmul_(model.grad, self.rho / (row_norm(model.grad) + self.eps))  # no host sync
        model.loss_and_grad(loss_fn, inputs, targets)
        model.x.copy_(self._saved)
        if self._g1 is not None:
            model.grad.mul_(self.mix).add_(self._g1, alpha=1.0 - self.mix)
        return loss


class LookAhead:
    """Gradient at x − b (FedMIM's look-ahead point, docs/algorithms/fedmim.md); x is restored by copy."""

    def __init__(self, shift: torch.Tensor):
        self.shift = shift
        self._saved: torch.Tensor | None = None

    def __call__(self, model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._saved is None:
            self._saved = torch.empty_like(model.x)
        self._saved.copy_(model.x)
        model.x.sub_(self.shift)
        loss = model.loss_and_grad(loss_fn, inputs, targets)
        model.x.copy_(self._saved)
        return loss


@dataclass
class Prox:
    """+ μ(x − centre): gradient of (μ/2)‖x − centre‖², centre = x^t unless given (FedProx, FedDyn).

    Its two halves are separate transforms because clip-scope='reference' clips the −μ·centre half with the
    gradient, as FL-Simulator's and FedDyn's code do (they write the prox as weight decay μ plus a linear loss
    term): see `prox_terms`."""

    mu: float
    centre: torch.Tensor | None = None

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> None:
        self.centre_part(d, ctx)
        self.iterate_part(d, ctx)

    def centre_part(self, d: torch.Tensor, ctx: StepContext) -> None:
        if self.mu:
            d.add_(ctx.x0 if self.centre is None else self.centre, alpha=-self.mu)

    def iterate_part(self, d: torch.Tensor, ctx: StepContext) -> None:
        if self.mu:
            d.add_(ctx.x, alpha=self.mu)


@dataclass
class AddVector:
    """+ scale·v: a fixed linear correction (SCAFFOLD c − c_i, FedDyn −∇L_i, FedADMM λ_i, FedCM (1−α)D …)."""

    vector: torch.Tensor
    scale: float = 1.0

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> None:
        d.add_(self.vector, alpha=self.scale)


@dataclass
class Scale:
    """d ← s·d (FedCM's α on the local gradient, FedMIM's A)."""

    factor: float

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> None:
        d.mul_(self.factor)


def prox_terms(
    mu: float, centre: torch.Tensor | None = None, clip_scope: str = "clean"
) -> tuple[tuple[Transform, ...], tuple[Transform, ...]]:
    """(clipped, unclipped) transforms of + μ(x − centre) under `clip_scope`: 'clean' clips none of it,
    'reference' clips the −μ·centre half (clipping: docs/algorithms/index.md)."""
    prox = Prox(mu, centre)
    if clip_scope == "reference":
        return (prox.centre_part,), (prox.iterate_part,)
    if clip_scope == "clean":
        return (), (prox,)
    raise ValueError(f"clip-scope={clip_scope!r}: allowed values are clean, reference")


def sgd_step(d: torch.Tensor, ctx: StepContext) -> torch.Tensor:
    """The default step stage: the move is the direction itself."""
    return d


class DualRegularisedSharpness:
    """FedSMOO's gradient point (DRegSAM, docs/algorithms/fedsmoo.md): the ascent direction is the loss gradient
    corrected by the client's dynamic dual ν_i and the server's global perturbation s, and ν_i follows the ascent:
        a = g1 − (ν_i + s),  e = ρ·a/(‖a‖ + eps),  ν_i ← ν_i + e − s,  gradient at x + e (same minibatch).
    `dual` (ν_i) is edited in place at every step, so the client's uplink reads its final value from the stage;
    `correction` is s. x is restored by copy, bit for bit. With ν_i = s = 0 it is SharpnessAware(ρ, eps=eps).
    Works on one client's (d,) vectors and on a cohort's stacked (C, d) rows (per-row norms)."""

    def __init__(self, rho: float, dual: torch.Tensor, correction: torch.Tensor, eps: float = 1e-7):
        self.rho, self.dual, self.correction, self.eps = rho, dual, correction, eps
        self._saved: torch.Tensor | None = None
        self._ascent: torch.Tensor | None = None

    def __call__(self, model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = model.loss_and_grad(loss_fn, inputs, targets)
        if self._saved is None:
            self._saved = torch.empty_like(model.x)
            self._ascent = torch.empty_like(model.x)
        a = self._ascent.copy_(self.dual).add_(self.correction).neg_().add_(model.grad)  # g1 − (ν_i + s)
        scale = self.rho / (row_norm(a) + self.eps)  # no host sync
        self._saved.copy_(model.x)
        model.x.addcmul_(a, scale)
        self.dual.addcmul_(a, scale).sub_(self.correction)
        model.loss_and_grad(loss_fn, inputs, targets)
        model.x.copy_(self._saved)
        return loss
