"""Device choice: CUDA when asked for or (auto) when visible, else CPU."""

from __future__ import annotations

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
