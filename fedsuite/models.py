"""Networks (ALGORITHMS.md §2.1) and the flat parameter view every algorithm works on.

`FlatModel` rebinds a module's parameters as views into one contiguous vector `x` (and their gradients into
one vector `grad`), so algorithm state, corrections and updates are single flat-tensor operations.
"""

from __future__ import annotations

import math
import threading

import torch
import torch.nn.functional as F
from torch import nn


def _cnn(in_ch: int, hw: tuple[int, int], classes: int) -> nn.Module:
    """Small CNN sized for CPU: c5(16)-pool-c5(32)-pool-fc128-fc (≈215k params on 28×28)."""
    flat = 32 * (hw[0] // 4) * (hw[1] // 4)
    return nn.Sequential(
        nn.Conv2d(in_ch, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Linear(128, classes),
    )  # fmt: skip


def _two_nn(features: int, classes: int) -> nn.Module:
    """McMahan et al.'s 2NN: 784-200-200-10 with ReLU (LoSAC's MNIST/HAR/ESR model)."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(features, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, classes)
    )


def _resnet18_gn(in_ch: int, classes: int) -> nn.Module:
    """torchvision ResNet-18 topology, every BatchNorm replaced by GroupNorm(2, c) (§2.1)."""
    from torchvision.models import resnet18

    net = resnet18(num_classes=classes, norm_layer=lambda c: nn.GroupNorm(2, c))
    if in_ch != 3:
        net.conv1 = nn.Conv2d(in_ch, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return net


class MatrixInner(nn.Module):
    """Prediction ⟨X, D⟩ of a square matrix parameter X (zeros at start) with each flattened input D: the low-rank
    estimation model of ALGORITHMS.md §3.7, whose X the nuclear-norm prox acts on."""

    def __init__(self, features: int):
        super().__init__()
        side = math.isqrt(features)
        if side * side != features:
            raise ValueError(f"model='matrix' needs square inputs; got {features} features")
        self.weight = nn.Parameter(torch.zeros(side, side))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.reshape(inputs.shape[0], -1) @ self.weight.reshape(-1, 1)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, task: str) -> nn.Module:
    features = math.prod(input_shape)
    if name == "matrix":
        return MatrixInner(features)
    if task != "classification":  # synthetic federations: x ∈ R^d, one output, no bias (x* is over d weights)
        return nn.Linear(features, 1, bias=False)
    if name == "cnn":
        return _cnn(input_shape[0], (input_shape[1], input_shape[2]), num_classes)
    if name == "2nn":
        return _two_nn(features, num_classes)
    if name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(features, num_classes))
    if name == "resnet18-gn":
        return _resnet18_gn(input_shape[0], num_classes)
    raise ValueError(f"model={name!r}: allowed values are cnn, 2nn, logreg, resnet18-gn, linear, matrix")


_INIT_LOCK = threading.Lock()


def initial_vector(name: str, input_shape: tuple[int, ...], num_classes: int, task: str, seed: int) -> torch.Tensor:
    """x^0: the flat parameters of a freshly built model under torch.manual_seed(seed), the same in every
    process; the global RNG is forked, so callers' random streams are untouched."""
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = build_model(name, input_shape, num_classes, task)
        return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def loss_function(task: str):
    """Mean loss over a minibatch: cross-entropy, logistic, or (1/2)·squared error."""
    if task == "classification":
        return F.cross_entropy
    if task == "binary":
        return lambda out, y: F.binary_cross_entropy_with_logits(out.squeeze(-1), y)
    return lambda out, y: 0.5 * F.mse_loss(out.squeeze(-1), y)


class FlatModel:
    """A module whose parameters are views into one flat vector `x`, gradients into one flat `grad`."""

    def __init__(
        self, module: nn.Module, device: torch.device | str = "cpu", autocast: str = "none", channels_last: bool = False
    ):
        """`autocast='bf16'`: forward pass under bfloat16 autocast (gradients and x stay float32); `channels_last`:
        4-D inputs in NHWC memory order. Both are speed options for GPUs, off by default (bf16 changes the numbers)."""
        if autocast not in ("none", "bf16"):
            raise ValueError(f"autocast={autocast!r}: allowed values are none, bf16")
        self.autocast, self.channels_last = autocast, channels_last
        if any(True for _ in module.buffers()):
            raise ValueError("models with buffers (e.g. BatchNorm statistics) cannot be averaged as flat vectors")
        self.module = module.to(device)
        params = list(self.module.parameters())
        self.x = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
        self.grad = torch.zeros_like(self.x)
        offset = 0
        for p in params:
            n = p.numel()
            p.data = self.x[offset : offset + n].view_as(p)
            p.grad = self.grad[offset : offset + n].view_as(p)
            offset += n

    @property
    def dim(self) -> int:
        return self.x.numel()

    @property
    def device(self) -> torch.device:
        return self.x.device

    def loss_and_grad(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Loss at the current `x` (a detached 0-d tensor, no device sync); its gradient overwrites `grad`."""
        self.grad.zero_()
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.x.device.type, dtype=torch.bfloat16, enabled=self.autocast == "bf16"):
            out = self.module(inputs)
        loss = loss_fn(out.float(), targets)
        loss.backward()
        return loss.detach()
