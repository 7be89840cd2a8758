"""Device choice: CUDA when asked for or (auto) when visible, else CPU; a tensor's values brought to the host."""

from __future__ import annotations

import numpy as np
import torch


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError(
                "device='cuda' but no CUDA device is visible in this process; in simulation give clients a GPU "
                "share with --federation-config 'client-resources-num-gpus=0.25', or use device='auto'"
            )
        return torch.device("cuda")
    return torch.device("cpu")


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a NumPy array on the host, for an array that is encoded and let go soon after (an
    uplink). From a CUDA device the copy goes through page-locked memory from torch's cache of pinned blocks: one
    DMA at full speed into memory that is mapped already, where a fresh pageable array would first fault in every
    page. The array holds its pinned block until it is let go (one client at a time: once its reply is encoded;
    batched: a round's uplinks together until the round's replies are collected), and torch keeps the blocks cached
    for the next round."""
    value = tensor.detach()
    if value.device.type != "cuda":
        return value.cpu().numpy()
    host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    host.copy_(value)
    return host.numpy()
