"""The one local training loop every algorithm runs, and the composable pieces of its update rule.

One step (docs/developer/architecture.md; conventions in docs/algorithms/index.md):
    (ξ, j) = next minibatch              epochs/iterations, or a fixed block j     (rule.batches)
    g  = ∇F_i(point; ξ)                 point = x, or a SAM / look-ahead point  (rule.point)
                                         dp-sgd: Σ clip(per-record ∇) + noise, / B (fedsuite/privacy/dp_sgd.py)
    g ← |ξ|·g                            loss-reduction='sum' (the LoSAC paper's block losses)
    d  = g + clipped terms               SCAFFOLD c − c_i, FedDyn −∇L_i, FedCM mix …   (rule.clipped)
    d  = clip(d, clip_norm)              the loss gradient and exactly the terms in rule.clipped
    d += unclipped terms                 FedProx μ(x − x^t), FedMIM's a_t …             (rule.unclipped)
    d += wd·x                            coupled weight decay
    u  = step(d)                         SGD: u = d; Adam-type rules               (rule.step)
    u += corrections after the step      FAdamET's y − y_i, FedLADA's mix …          (rule.after_step)
    x ← x − η_l·u
    x ← prox(x)                          ℓ1 / nuclear-norm proximal operators       (rule.proximal)
Which terms are clipped is part of the rule: a term sits in `clipped` or in `unclipped`. The prox term
+μ(x − centre) is written by `prox_terms`, which puts its −μ·centre half among the clipped terms under
clip-scope='reference' (as FL-Simulator's and FedDyn's code do) and the whole term after the clip under 'clean'.
Every vector is a flat tensor on the training device; the direction reuses the gradient buffer. The stages work on
one client's (d,) vectors and on a cohort's stacked (C, d) rows alike (norms are per row, `row_norm`), so the stacked
loop of fedsuite/batched/ runs the same stages and the same `move` as `train_local`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from fedsuite.config.settings import schema_default
from fedsuite.models.networks import FlatModel

# A transform edits the direction `d` in place, given the live iterate and the round's start point.
Transform = Callable[[torch.Tensor, "StepContext"], None]


# A step turns the direction d into the move u (x ← x − η_l·u); it may return d itself (SGD).
Step = Callable[[torch.Tensor, "StepContext"], torch.Tensor]
# A proximal operator maps x in place after the move, given the step's η_l.
ProximalOp = Callable[[torch.Tensor, float, "StepContext"], None]
# A batch source yields (inputs, targets, block): block is the fixed data block of the step, or None.
BatchSource = Callable[..., Iterator[tuple[torch.Tensor, torch.Tensor, int | None]]]


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


@dataclass
class UpdateRule:
    """The stages of one local step (module docstring); every field defaults to plain SGD."""

    point: Callable = field(default_factory=AtIterate)
    clipped: Sequence[Transform] = ()  # added to the loss gradient before the clip, and clipped with it
    unclipped: Sequence[Transform] = ()  # added after the clip
    step: Step = sgd_step
    after_step: Sequence[Transform] = ()
    proximal: Sequence[ProximalOp] = ()
    batches: BatchSource | None = None  # None: minibatches() over the local data
    parts: dict[str, Any] = field(default_factory=dict)  # named stages the client's uplink reads after the round


@dataclass
class LocalData:
    inputs: torch.Tensor  # normalised features on the training device
    targets: torch.Tensor
    crop_pad: int = 0  # random crop (this padding) + horizontal flip per minibatch

    def __len__(self) -> int:
        return int(self.targets.shape[0])


@dataclass
class LocalResult:
    """What the local loop hands the client's uplink: where it started (x^t, or the relaxed start x_{i,0} under
    relaxed-init, so x − x0 is Δ_i from the client's own start: docs/running/relaxed-init.md), the final iterate
    x_{i,K} (a view of the model's parameters), K_i, the losses and the loop's seconds (docs/own/algorithm.md)."""

    x0: torch.Tensor
    x: torch.Tensor
    steps: int
    mean_loss: float
    seconds: float
    first_loss: float | None = None  # the loss of the first step, at x0 before any update (the run guard's reference)


@dataclass(frozen=True)
class LocalSettings:
    """What one round's local loop runs with besides its rule, data and generator: the round's η_l and K_i, and
    the run's local-loop keys (fedsuite.config.run_config.LocalLoop, `cfg.local`); `of_round` builds it."""

    lr: float  # η_l of this round (lr-decay applied)
    steps: int  # K_i; 0 = epoch mode
    epochs: int  # E (local-epochs), read when steps = 0
    batch_size: int  # B (batch-size); 0 = the full local batch
    weight_decay: float  # coupled L2 (weight-decay)
    clip_norm: float  # clip-norm; 0 = off
    loss_reduction: str = field(default_factory=lambda: schema_default("loss-reduction"))

    @classmethod
    def of_round(cls, local: Any, lr: float, steps: int) -> LocalSettings:
        """The settings of a round from the run's `cfg.local` (a fedsuite.config.run_config.LocalLoop), with its η_l
        and K_i."""
        return cls(lr, steps, local.epochs, local.batch_size, local.weight_decay, local.clip_norm,
                   local.loss_reduction)  # fmt: skip

    @classmethod
    def given(cls, settings: LocalSettings | None, keywords: dict[str, Any]) -> LocalSettings:
        """`settings`, or the one the loop's keywords name like its fields (the form before settings=, kept for its
        callers)."""
        if settings is None:
            return cls(**keywords)
        if keywords:
            raise TypeError(f"give settings= or the keywords {', '.join(keywords)}, not both")
        return settings


def num_steps(n: int, epochs: int, steps: int, batch_size: int) -> int:
    """K_i: fixed `steps`, else E·ceil(n_i/B) with the last partial batch kept
    (docs/reference/protocol.md, Local work)."""
    if steps > 0:
        return steps
    b = n if batch_size <= 0 else min(batch_size, n)
    return epochs * math.ceil(n / b)


def minibatches(
    data: LocalData, epochs: int, steps: int, batch_size: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Epoch mode: reshuffle every epoch. Iteration mode (steps > 0): each step draws B distinct samples."""
    n = len(data)
    b = n if batch_size <= 0 else min(batch_size, n)
    device = data.inputs.device
    if steps > 0:
        for _ in range(steps):
            idx = torch.randperm(n, generator=generator)[:b].to(device) if b < n else None
            yield _batch(data, idx, generator)
        return
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator).to(device) if b < n else None
        for start in range(0, n, b):
            yield _batch(data, None if perm is None else perm[start : start + b], generator)


def plain_batches(data: LocalData, epochs: int, steps: int, batch_size: int, generator: torch.Generator):
    """The default batch source: `minibatches` with no fixed block."""
    for inputs, targets in minibatches(data, epochs, steps, batch_size, generator):
        yield inputs, targets, None


def _batch(data: LocalData, idx: torch.Tensor | None, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = data.inputs if idx is None else data.inputs[idx]
    y = data.targets if idx is None else data.targets[idx]
    if data.crop_pad:
        x = crop_flip(x, data.crop_pad, generator)
    return x, y


def crop_flip(x: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Random crop with zero padding `pad` and random horizontal flip, per sample, as batched tensor ops."""
    return crop_flip_drawn(x, pad, *crop_flip_draws(len(x), pad, generator))


def crop_flip_draws(b: int, pad: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The random draws of `crop_flip` for b samples, in its order: row offsets, column offsets, flips."""
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    return dy, dx, torch.rand(b, generator=generator) < 0.5


def crop_flip_drawn(x: torch.Tensor, pad: int, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """`crop_flip` with its draws given (`crop_flip_draws`): a gather, so any number of samples at once."""
    b, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    dy, dx, flip = dy.to(x.device), dx.to(x.device), flip.to(x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = dx[:, None] + torch.arange(w, device=x.device)
    cols = torch.where(flip[:, None], cols.flip(-1), cols)[:, None, None, :]
    return padded[
        torch.arange(b, device=x.device)[:, None, None, None],
        torch.arange(c, device=x.device)[None, :, None, None],
        rows,
        cols,
    ]


def train_local(
    model: FlatModel,
    x0: torch.Tensor,
    data: LocalData,
    loss_fn,
    rule: UpdateRule,
    *,
    generator: torch.Generator,
    settings: LocalSettings | None = None,
    private: Any = None,
    **keywords: Any,
) -> LocalResult:
    """Run K_i local steps from x0 with `rule` and `settings` (η_l, K_i, E, B, weight decay, clipping, loss
    reduction: `LocalSettings.of_round`; or, as before settings=, those as keywords named like its fields); returns
    the final iterate (a view of model.x). `private`: a fedsuite.privacy.dp_sgd.DpSgd (dp-sgd=true), whose model the
    oracle takes its gradients from; None: the plain gradient."""
    settings = LocalSettings.given(settings, keywords)
    start = time.perf_counter()
    x = model.x
    x.copy_(x0)
    ctx = StepContext(x=x, x0=x0, lr=settings.lr)
    loss_sum = torch.zeros((), device=x.device)
    first_loss = None
    k = 0
    source = rule.batches or plain_batches
    oracle_model = model if private is None else private.bind(model, rule, generator)
    for inputs, targets, block in source(data, settings.epochs, settings.steps, settings.batch_size, generator):
        ctx.step, ctx.block = k, block
        if private is not None:
            private.new_step()
        loss = rule.point(oracle_model, loss_fn, inputs, targets)
        loss_sum += loss
        if first_loss is None:
            first_loss = loss.detach().clone()
        move(model.grad, ctx, rule, batch=len(targets), settings=settings)
        k += 1
    mean_loss = float(loss_sum) / max(k, 1)
    first = None if first_loss is None else float(first_loss)
    return LocalResult(x0=x0, x=x, steps=k, mean_loss=mean_loss, seconds=time.perf_counter() - start, first_loss=first)


def move(d: torch.Tensor, ctx: StepContext, rule: UpdateRule, *, batch: int, settings: LocalSettings) -> None:
    """One step after the gradient (module docstring): the loss gradient `d` (the model's gradient buffer, edited in
    place) becomes the direction, the step stage's move is taken, ctx.x ← ctx.x − η_l·u, then the proximal operators.
    `batch`: the minibatch's size (loss-reduction='sum'); `settings`: its weight decay, clipping and loss reduction.
    For one client's (d,) vectors or a cohort's (C, d) rows."""
    x, lr = ctx.x, ctx.lr
    weight_decay, clip_norm = settings.weight_decay, settings.clip_norm
    if settings.loss_reduction == "sum":
        d.mul_(batch)
    for transform in rule.clipped:
        transform(d, ctx)
    if clip_norm > 0:
        d.mul_(torch.clamp(clip_norm / (row_norm(d) + 1e-6), max=1.0))
    for transform in rule.unclipped:
        transform(d, ctx)
    if weight_decay:
        d.add_(x, alpha=weight_decay)
    u = rule.step(d, ctx)
    for transform in rule.after_step:
        transform(u, ctx)
    x.add_(u, alpha=-lr)
    for prox in rule.proximal:
        prox(x, lr, ctx)


def full_gradient(model: FlatModel, x: torch.Tensor, data: LocalData, loss_fn, batch_size: int = 1000) -> torch.Tensor:
    """∇F_i(x) over the whole local dataset (mean loss), one pass without augmentation (SCAFFOLD option I)."""
    model.x.copy_(x)
    total = torch.zeros_like(x)
    n = len(data)
    for start in range(0, n, batch_size):
        inputs, targets = data.inputs[start : start + batch_size], data.targets[start : start + batch_size]
        model.loss_and_grad(loss_fn, inputs, targets)
        total.add_(model.grad, alpha=len(targets) / n)
    return total


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
