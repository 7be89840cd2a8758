"""Centralised evaluation of the broadcast model x^{t+1} (ALGORITHMS.md §0.3.4, §2.7)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsuite.data import Dataset
from fedsuite.data.synthetic import SyntheticFederation
from fedsuite.models import FlatModel, loss_function, seeded_model


class Evaluator:
    """Test accuracy and mean loss; for synthetic federations also f(x) − f* and ‖x − x*‖/‖x*‖."""

    def __init__(self, dataset: Dataset, model_name: str, device: torch.device, batch_size: int = 1000,
                 seed: int = 0, model_args: str = ""):  # fmt: skip
        """The model is built under the run `seed`: its frozen parameters are the clients'."""
        self.dataset = dataset
        net = seeded_model(model_name, dataset.input_shape, dataset.num_classes, dataset.task, seed, model_args)
        self.model = FlatModel(net.eval(), device)
        self.loss_fn = loss_function(dataset.task)
        self.inputs = dataset.features(dataset.test, None, str(device))
        self.targets = dataset.test.y.to(device)
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, x: np.ndarray, buffers: np.ndarray | None = None) -> dict[str, Any]:
        """Metrics of the trainable parameters `x` with the model's `buffers` (default: the initial ones), in eval
        mode (BatchNorm uses its running statistics)."""
        self.model.x.copy_(torch.as_tensor(x, device=self.model.device))
        if buffers is not None:
            self.model.buffers.copy_(torch.as_tensor(buffers, device=self.model.device))
        loss_sum = torch.zeros((), device=self.model.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.model.device, dtype=torch.long)
        n = len(self.targets)
        for start in range(0, n, self.batch_size):
            xb, yb = self.inputs[start : start + self.batch_size], self.targets[start : start + self.batch_size]
            out = self.model.module(xb)
            loss_sum += self.loss_fn(out, yb).double() * len(yb)
            if self.dataset.task == "classification":
                correct += (out.argmax(1) == yb).sum()
            elif self.dataset.task == "binary":
                correct += ((out.squeeze(-1) > 0).long() == yb.long()).sum()
        metrics: dict[str, Any] = {"loss": float(loss_sum) / n}
        if self.dataset.task != "regression":
            metrics["accuracy"] = int(correct) / n
        if isinstance(self.dataset, SyntheticFederation):
            fx = self.dataset.objective(x)
            metrics.update(
                loss=fx, objective_gap=fx - self.dataset.f_star, relative_error=self.dataset.relative_error(x)
            )
        return metrics
