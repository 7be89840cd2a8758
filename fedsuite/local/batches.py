"""The minibatches a client's local round trains on: its local data (`LocalData`), the number of steps K_i of a
round, the default batch source (epochs reshuffled, or K draws of B distinct samples) and the random crop-and-flip
augmentation, drawn from the client's own generator so that a stacked cohort (fedsuite/batched/) sees the same samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# A batch source yields (inputs, targets, block): block is the fixed data block of the step, or None.
BatchSource = Callable[..., Iterator[tuple[torch.Tensor, torch.Tensor, int | None]]]


@dataclass
class LocalData:
    inputs: torch.Tensor  # normalised features on the training device
    targets: torch.Tensor
    crop_pad: int = 0  # random crop (this padding) + horizontal flip per minibatch

    def __len__(self) -> int:
        return int(self.targets.shape[0])


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
