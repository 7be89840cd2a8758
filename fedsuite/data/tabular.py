"""Tabular classification data (HAR, ESR: docs/reference/protocol.md): float features, standardised once.

Features are standardised per feature with the training split's mean and std (a constant feature keeps std 1),
and the same statistics are applied to the test split, so no test information reaches training.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fedsuite.data.datasets import Split


@dataclass
class Tabular:
    name: str
    train: Split  # float32 N×d standardised features, int64 labels
    test: Split
    num_classes: int
    mean: tuple[float, ...]  # the training statistics that were applied
    std: tuple[float, ...]
    crop_pad: int = 0
    task: str = field(default="classification", init=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    def features(self, split: Split, idx: np.ndarray | None = None, device: str = "cpu") -> torch.Tensor:
        x = split.x if idx is None else split.x[torch.as_tensor(idx, dtype=torch.long)]
        return x.to(device)


def standardised(
    name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, num_classes: int
) -> Tabular:
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)

    def split(x: np.ndarray, y: np.ndarray) -> Split:
        z = ((x - mean) / std).astype(np.float32)
        return Split(torch.from_numpy(z), torch.from_numpy(np.asarray(y, dtype=np.int64)))

    return Tabular(
        name,
        split(x_train, y_train),
        split(x_test, y_test),
        num_classes,
        tuple(float(m) for m in mean),
        tuple(float(s) for s in std),
    )
