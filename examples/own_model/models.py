"""Model factories for `model='examples.own_model.models:<name>'` (docs/own/model.md).

A factory is any callable returning a torch.nn.Module; fedsuite passes `input_shape` and `num_classes` when the
signature names them, and `model-args` as further keyword arguments. It is called under the run seed in every
process, so the initial model (and any frozen part) is the same on the server and on every client.
"""

from __future__ import annotations

import math

from torch import nn


def bn_cnn(input_shape: tuple[int, ...], num_classes: int, width: int = 16) -> nn.Module:
    """A small CNN with BatchNorm: its running statistics are averaged beside the algorithm (buffers='average') or
    kept by each client (buffers='local', FedBN)."""
    channels = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(2 * width, num_classes),
    )  # fmt: skip


def frozen_features(input_shape: tuple[int, ...], num_classes: int, hidden: int = 256) -> nn.Module:
    """A random frozen feature layer with a trainable linear head: only the head is federated (d = its size)."""
    features = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU())
    features.requires_grad_(False)
    return nn.Sequential(features, nn.Linear(hidden, num_classes))


def small_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The built-in `cnn` written as user code (two 5×5 convolutions with pooling, two linear layers): the same
    layers in the same order give the same seeded initial model, so `simulation.benchmarks.overhead --model
    examples.own_model.models:small_cnn` measures what the factory path costs against the built-in name."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (height // 4) * (width // 4), 128), nn.ReLU(), nn.Linear(128, num_classes),
    )  # fmt: skip
