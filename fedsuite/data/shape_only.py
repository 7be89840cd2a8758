"""What a server without data (server-data=false) knows of the dataset: one sample's shape and the number of
classes. Enough to build x^0 and check the model on a zero sample; it holds no samples to train or evaluate on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedsuite.data.datasets import Split


@dataclass
class ShapeOnly:
    """The dataset interface the model builders read (name, input_shape, num_classes, task), without data. `test`
    is one all-zero sample, the model check's input; `train` is empty."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    crop_pad: int = 0

    @property
    def task(self) -> str:
        """classification when there are classes to tell apart (num-classes > 1), else regression."""
        return "classification" if self.num_classes > 1 else "regression"

    @property
    def train(self) -> Split:
        return Split(torch.zeros((0, *self.input_shape)), torch.zeros(0, dtype=self._label_dtype))

    @property
    def test(self) -> Split:
        return Split(torch.zeros((1, *self.input_shape)), torch.zeros(1, dtype=self._label_dtype))

    @property
    def _label_dtype(self) -> torch.dtype:
        return torch.long if self.task == "classification" else torch.float32

    def features(self, split: Split, idx: np.ndarray | None = None, device: str = "cpu") -> torch.Tensor:
        x = split.x if idx is None else split.x[torch.as_tensor(idx, dtype=torch.long)]
        return x.to(device)


def shape_only(name: str, input_shape: tuple[int, ...], num_classes: int) -> ShapeOnly:
    return ShapeOnly(name, tuple(int(s) for s in input_shape), int(num_classes))
