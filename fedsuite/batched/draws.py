"""A client's whole round of minibatches drawn at once, for the stacked loop (fedsuite/batched/loop.py).

In iteration mode (`local-steps` K > 0) with the default batch source, `fedsuite.local.loop.minibatches` draws, step by
step from the client's generator, B distinct sample indices and then (with random crops) the crop offsets and flips.
`drawn_round` makes the same draws in the same order on the host, then gathers and augments all K·B samples on the
device in one go: the same tensors, without a dozen small transfers and kernels per client and step, which is what
a GPU's batched step waits on. Other batch sources and epoch mode are drawn step by step as before.
"""

from __future__ import annotations

import torch

from fedsuite.local.loop import LocalData, crop_flip_drawn, crop_flip_draws

MAX_BYTES = 2 << 30  # a group's drawn inputs above this are drawn step by step instead


def drawn_round(data: LocalData, steps: int, batch_size: int, generator: torch.Generator):
    """(inputs (K, B, …), targets (K, B)) of the K steps `minibatches` would yield, drawn from `generator` in its
    order."""
    n = len(data)
    b = n if batch_size <= 0 else min(batch_size, n)
    indices, crops = [], []
    for _ in range(steps):
        indices.append(torch.randperm(n, generator=generator)[:b] if b < n else torch.arange(n))
        if data.crop_pad:
            crops.append(crop_flip_draws(b, data.crop_pad, generator))
    idx = torch.stack(indices).to(data.inputs.device)
    inputs = data.inputs[idx.reshape(-1)]
    if data.crop_pad:
        dy, dx, flip = (torch.cat(parts) for parts in zip(*crops, strict=True))
        inputs = crop_flip_drawn(inputs, data.crop_pad, dy, dx, flip)
    return inputs.reshape(steps, b, *inputs.shape[1:]), data.targets[idx]


def drawable(datas, rules, steps: int, batch_size: int) -> bool:
    """Whether a group's round can be drawn at once: iteration mode, the default batch source, and drawn inputs
    within MAX_BYTES."""
    if steps <= 0 or any(rule.batches is not None for rule in rules):
        return False
    size = 0
    for data in datas:
        b = len(data) if batch_size <= 0 else min(batch_size, len(data))
        size += steps * b * data.inputs[:1].numel() * data.inputs.element_size()
    return size <= MAX_BYTES
