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
loop of fedsuite/batched/ runs the same stages and the same `move` as `train_local`. The stages themselves are in
fedsuite/local/stages.py, the minibatches in fedsuite/local/batches.py; this module hands their names on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fedsuite.config.settings import schema_default

# Besides what it uses, this module hands on the names it held before its stages (stages.py) and its batches
# (batches.py) moved out (marked F401): algorithms and plug-ins import them from here.
from fedsuite.local.batches import (  # noqa: F401
    BatchSource,
    LocalData,
    _batch,
    crop_flip,
    crop_flip_drawn,
    crop_flip_draws,
    minibatches,
    num_steps,
    plain_batches,
)
from fedsuite.local.stages import (  # noqa: F401
    AddVector,
    AtIterate,
    DualRegularisedSharpness,
    LookAhead,
    Prox,
    ProximalOp,
    Scale,
    SharpnessAware,
    Step,
    StepContext,
    Transform,
    prox_terms,
    row_norm,
    sgd_step,
)
from fedsuite.models.networks import FlatModel


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
        keys = (local.epochs, local.batch_size, local.weight_decay, local.clip_norm, local.loss_reduction)
        return cls(lr, steps, *keys)

    @classmethod
    def given(cls, settings: LocalSettings | None, keywords: dict[str, Any]) -> LocalSettings:
        """`settings`, or the one the loop's keywords name like its fields (the form before settings=, kept for its
        callers)."""
        if settings is None:
            return cls(**keywords)
        if keywords:
            raise TypeError(f"give settings= or the keywords {', '.join(keywords)}, not both")
        return settings


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
