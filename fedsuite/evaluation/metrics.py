"""Evaluation of the broadcast model x^{t+1} (docs/evaluation.md; docs/reference/protocol.md, Metrics): centrally on
the server's test set (`Evaluator`), on the union of the clients' validation shares (`validation_evaluator`), and by
the clients on their own held-out data (fedsuite/node/client.py `evaluate`). One batched pass (`batch_metrics`)
serves all three."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsuite.data import Dataset
from fedsuite.data.synthetic import SyntheticFederation
from fedsuite.models.networks import FlatModel, loss_function, seeded_model


@torch.no_grad()
def batch_metrics(module: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn, task: str,
                  batch_size: int) -> tuple[float, float | None]:  # fmt: skip
    """(mean loss, accuracy or None for regression) of `module` over (inputs, targets), `batch_size` rows at a time;
    the loss sum is accumulated in float64. The caller sets eval mode."""
    device = targets.device
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct = torch.zeros((), device=device, dtype=torch.long)
    n = len(targets)
    for start in range(0, n, batch_size):
        xb, yb = inputs[start : start + batch_size], targets[start : start + batch_size]
        out = module(xb)
        loss_sum += loss_fn(out, yb).double() * len(yb)
        if task == "classification":
            correct += (out.argmax(1) == yb).sum()
        elif task == "binary":
            correct += ((out.squeeze(-1) > 0).long() == yb.long()).sum()
    return float(loss_sum) / n, (None if task == "regression" else int(correct) / n)


class Evaluator:
    """Test accuracy and mean loss; for synthetic federations also f(x) − f* and ‖x − x*‖/‖x*‖. Given `rows`
    (inputs, targets), it evaluates those instead of the test set (no synthetic extras)."""

    def __init__(self, dataset: Dataset, model_name: str, device: torch.device, batch_size: int = 1000,
                 seed: int = 0, model_args: str = "",
                 rows: tuple[torch.Tensor, torch.Tensor] | None = None):  # fmt: skip
        """The model is built under the run `seed`: its frozen parameters are the clients'."""
        self.dataset = dataset
        net = seeded_model(model_name, dataset.input_shape, dataset.num_classes, dataset.task, seed, model_args)
        self.model = FlatModel(net.eval(), device)
        self.loss_fn = loss_function(dataset.task)
        self.objective = rows is None and isinstance(dataset, SyntheticFederation)
        if rows is None:
            rows = (dataset.features(dataset.test, None, str(device)), dataset.test.y)
        self.inputs, self.targets = rows[0].to(device), rows[1].to(device)
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, x: np.ndarray, buffers: np.ndarray | None = None) -> dict[str, Any]:
        """Metrics of the trainable parameters `x` with the model's `buffers` (default: the initial ones), in eval
        mode (BatchNorm uses its running statistics)."""
        self.model.x.copy_(torch.as_tensor(x, device=self.model.device))
        if buffers is not None:
            self.model.buffers.copy_(torch.as_tensor(buffers, device=self.model.device))
        loss, accuracy = batch_metrics(self.model.module, self.inputs, self.targets, self.loss_fn,
                                       self.dataset.task, self.batch_size)  # fmt: skip
        metrics: dict[str, Any] = {"loss": loss}
        if accuracy is not None:
            metrics["accuracy"] = accuracy
        if self.objective:
            fx = self.dataset.objective(x)
            metrics.update(
                loss=fx, objective_gap=fx - self.dataset.f_star, relative_error=self.dataset.relative_error(x)
            )
        return metrics


class ValidationEvaluator:
    """Central validation: the metrics of x on the union of the clients' validation shares, as val_loss and
    val_accuracy."""

    def __init__(self, evaluator: Evaluator):
        self.evaluator = evaluator

    def __call__(self, x: np.ndarray, buffers: np.ndarray | None = None) -> dict[str, Any]:
        metrics = self.evaluator(x, buffers)
        return {f"val_{k}": v for k, v in metrics.items() if k in ("loss", "accuracy")}


def validation_evaluator(cfg, dataset: Dataset, device: torch.device) -> ValidationEvaluator | None:
    """The server's evaluation on the union of every client's validation share (validation-fraction > 0, the server
    holds the data), drawn by the same seeded function as the clients' (fedsuite.data.holdout); else None."""
    from fedsuite.data import validation_rows

    if cfg.evaluation.validation_fraction <= 0 or not cfg.data.on_server:
        return None
    rows = validation_rows(cfg, dataset, str(device))
    if rows is None:
        return None
    evaluator = Evaluator(dataset, cfg.model, device, cfg.evaluation.eval_batch_size, cfg.seed, cfg.model_args, rows)
    return ValidationEvaluator(evaluator)
