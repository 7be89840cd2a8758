"""Deep Leakage from Gradients (Zhu, Liu, Han 2019; docs/dlg/index.md): reconstruct a private batch from the
gradient a client reveals.

Dummy inputs X' ~ N(0, 1) and soft-label logits Y' ~ N(0, 1) are moved to minimise
D(X', Y') = ‖∇_x ℓ(F(X'; x), soft(Y')) − ∇W‖², soft = softmax (classification) or sigmoid (binary, one logit),
either by plain gradient descent (the LoSAC paper's setting: step 1e-3, 100 iterations) or by L-BFGS (the DLG
paper and code). ‖X' − X‖_F and D are recorded before the first and after every iteration. The attack runs in
float64 on a functional view of the network (`flat_forward`), so the model's own parameters are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (flat parameters x, inputs) -> outputs
SoftLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (outputs, label probabilities) -> loss
OPTIMIZERS = ("gd", "lbfgs")
Distance = Callable[[], torch.Tensor]  # D(X', Y') at the current dummy inputs and label logits
Record = Callable[[torch.Tensor], None]  # notes ‖X' − X‖_F and a value of D


def flat_forward(module: nn.Module) -> Forward:
    """F(inputs; x) with the module's parameters taken, in `parameters()` order, from the flat vector x."""
    names_shapes = [(name, p.shape) for name, p in module.named_parameters()]

    def forward(x: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        params, offset = {}, 0
        for name, shape in names_shapes:
            size = math.prod(shape)
            params[name] = x[offset : offset + size].view(shape)
            offset += size
        return torch.func.functional_call(module, params, (inputs,))

    return forward


def soft_loss(task: str, reduction: str = "mean") -> SoftLoss:
    """The training loss (fedsuite.models.networks.loss_function) with label probabilities as targets."""
    if task == "classification":
        return lambda out, probs: F.cross_entropy(out, probs, reduction=reduction)
    if task == "binary":
        return lambda out, probs: F.binary_cross_entropy_with_logits(out.squeeze(-1), probs, reduction=reduction)
    raise ValueError(f"task={task!r}: the DLG attack needs a classification or binary task")


def label_probabilities(task: str, logits: torch.Tensor) -> torch.Tensor:
    """soft(Y'): softmax over classes, or sigmoid of the single binary logit."""
    return logits.softmax(-1) if task == "classification" else torch.sigmoid(logits)


def hard_probabilities(task: str, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The true labels as probabilities (one-hot, or 0/1), for D at the true batch."""
    if task == "classification":
        return F.one_hot(targets.long(), num_classes).double()
    return targets.double()


def label_shape(task: str, batch: int, num_classes: int) -> tuple[int, ...]:
    return (batch, num_classes) if task == "classification" else (batch,)


def model_gradient(
    forward: Forward, loss: SoftLoss, x: torch.Tensor, inputs: torch.Tensor, probs: torch.Tensor, graph: bool = False
) -> torch.Tensor:
    """∇_x ℓ(F(inputs; x), probs); with graph=True differentiable in inputs and probs (create_graph)."""
    x = x.detach().requires_grad_(True)
    value = loss(forward(x, inputs), probs)
    return torch.autograd.grad(value, x, create_graph=graph)[0]


def pseudo_gradient(delta: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """What an attacker reads from an uplink Δ = x_1^+ − x^t: (x^t − x_1^+)/(η·T) (docs/dlg/index.md, the
    correct sign; the paper's (x_1^+ − x)/(ηL) points uphill). One full-batch step gives ∇F_1(x) exactly."""
    return -delta / (lr * steps)


@dataclass
class AttackTrace:
    errors: list[float]  # ‖X' − X‖_F before the first iteration (index 0) and after each iteration
    distances: list[float]  # D(X', Y') at the same points
    inputs: torch.Tensor  # the final X'
    label_logits: torch.Tensor  # the final Y'


def dlg_attack(
    forward: Forward,
    loss: SoftLoss,
    task: str,
    x: torch.Tensor,
    observed: torch.Tensor,
    true_inputs: torch.Tensor,
    labels_shape: tuple[int, ...],
    *,
    iterations: int = 100,
    lr: float = 1e-3,
    optimizer: str = "gd",
    seed: int = 0,
    line_search: str | None = None,
) -> AttackTrace:
    """Run the attack against `observed` (the revealed gradient at model x); `true_inputs` only scores it.
    `line_search`: L-BFGS's line search (None: fixed steps of `lr`, as the DLG code; "strong_wolfe")."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r}: allowed values are {', '.join(OPTIMIZERS)}")
    x = x.detach().double()
    observed = observed.detach().double().to(x.device)
    truth = true_inputs.detach().double().to(x.device)
    generator = torch.Generator().manual_seed(seed)
    dummy = torch.randn(truth.shape, generator=generator, dtype=torch.float64).to(x.device).requires_grad_(True)
    logits = torch.randn(labels_shape, generator=generator, dtype=torch.float64).to(x.device).requires_grad_(True)

    def distance() -> torch.Tensor:
        grad = model_gradient(forward, loss, x, dummy, label_probabilities(task, logits), graph=True)
        return (grad - observed).pow(2).sum()

    errors, distances = [], []

    def record(value: torch.Tensor) -> None:
        errors.append(float((dummy.detach() - truth).norm()))
        distances.append(float(value.detach()))

    if optimizer == "gd":
        _descend(distance, record, dummy, logits, iterations, lr)
    else:
        _lbfgs(distance, record, dummy, logits, iterations, lr, line_search)
    record(distance().detach())
    return AttackTrace(errors, distances, dummy.detach(), logits.detach())


def _descend(
    distance: Distance, record: Record, dummy: torch.Tensor, logits: torch.Tensor, iterations: int, lr: float
) -> None:
    """Plain gradient descent on X' and Y' (the LoSAC paper's setting), `record`ing D before each iteration."""
    for _ in range(iterations):
        value = distance()
        record(value)
        g_inputs, g_logits = torch.autograd.grad(value, [dummy, logits])
        with torch.no_grad():
            dummy.sub_(lr * g_inputs)
            logits.sub_(lr * g_logits)


def _lbfgs(
    distance: Distance,
    record: Record,
    dummy: torch.Tensor,
    logits: torch.Tensor,
    iterations: int,
    lr: float,
    line_search: str | None,
) -> None:
    """As the DLG code: one L-BFGS step (up to 20 inner evaluations) per iteration, `record`ing D before each."""
    opt = torch.optim.LBFGS(
        [dummy, logits], lr=lr, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn=line_search
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = distance()
        value.backward()
        return value

    for _ in range(iterations):
        record(distance().detach())
        opt.step(closure)
