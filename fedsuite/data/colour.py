"""FedMIM's per-client colour perturbation (docs/reference/protocol.md, Partitions; [decision]).

Client i draws once, from (run seed, partition id) alone, b_i ~ U[0.6, 1.4] and s_i ~ U[0.6, 1.4], and applies
torchvision's `adjust_brightness(b_i)` then `adjust_saturation(s_i)` to every one of its training images, as uint8
on the training device, before normalisation. The test set is never perturbed.
"""

from __future__ import annotations

import numpy as np
import torch

LOW, HIGH = 0.6, 1.4  # b_i, s_i ~ U[0.6, 1.4]
_STREAM = 0xC0105  # keeps this draw apart from the other (seed, …) streams (cohorts, minibatches)


def client_coefficients(seed: int, partition_id: int) -> tuple[float, float]:
    """(b_i, s_i) of client `partition_id` in a run with `seed`: the same on every call, process and device."""
    rng = np.random.default_rng(np.random.SeedSequence([_STREAM, int(seed), int(partition_id)]))
    brightness, saturation = rng.uniform(LOW, HIGH, size=2)
    return float(brightness), float(saturation)


def perturb(images: torch.Tensor, brightness: float, saturation: float) -> torch.Tensor:
    """N×3×H×W uint8 images with brightness, then saturation adjusted (torchvision's functions, batched)."""
    from torchvision.transforms.functional import adjust_brightness, adjust_saturation

    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"colour perturbation needs N×3×H×W images, got shape {tuple(images.shape)}")
    return adjust_saturation(adjust_brightness(images, brightness), saturation)
