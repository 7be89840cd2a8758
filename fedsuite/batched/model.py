"""A FlatModel's module over C clients' parameters at once: rows of a (C, d) matrix, inputs (C, B, …), per-client
losses (C,) and gradients (C, d) from torch.func (`functional_call`, `vmap`, `grad_and_value`).

It offers what the loop's gradient points use of a FlatModel (`x`, `grad`, `loss_and_grad`), so the same point
stages (fedsuite/local.py, fedsuite/adaptive.py) run on it. A model with buffers (BatchNorm statistics) is not
batchable: its statistics are per client and updated by the forward pass.
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad_and_value, vmap

from fedsuite.models import FlatModel, trainable


def unbatchable_model(model: FlatModel) -> str | None:
    """Why `model` cannot be stacked, in a few words, or None."""
    if model.buffers.numel():
        return "the model has buffers (BatchNorm statistics), which a forward pass updates per client"
    return None


class StackedModel:
    """C copies of `model`'s module as rows of `x` (C, d); `grad` (C, d) holds the last per-client gradients."""

    def __init__(self, model: FlatModel, clients: int):
        self.module, self.autocast = model.module, model.autocast
        names = {id(p): name for name, p in model.module.named_parameters()}
        params = trainable(model.module)
        self._layout = [(names[id(p)], tuple(p.shape), p.numel()) for p in params]
        dim = sum(math.prod(shape) for _, shape, _ in self._layout)
        self.x = torch.empty((clients, dim), dtype=model.x.dtype, device=model.x.device)
        self.grad = torch.zeros_like(self.x)
        self._gradients = {}  # loss_fn → its vmapped gradient function

    def _params(self, row: torch.Tensor) -> dict[str, torch.Tensor]:
        params, offset = {}, 0
        for name, shape, n in self._layout:
            params[name] = row[offset : offset + n].view(shape)
            offset += n
        return params

    def _gradient(self, loss_fn):
        if loss_fn not in self._gradients:
            module, autocast = self.module, self.autocast == "bf16"

            def loss(row, inputs, targets):
                with torch.autocast(row.device.type, dtype=torch.bfloat16, enabled=autocast):
                    out = functional_call(module, self._params(row), (inputs,))
                return loss_fn(out.float(), targets)

            self._gradients[loss_fn] = vmap(grad_and_value(loss))
        return self._gradients[loss_fn]

    def loss_and_grad(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each client's loss at its row of `x` on its minibatch, (C,) detached; the gradients overwrite `grad`."""
        gradients, losses = self._gradient(loss_fn)(self.x, inputs, targets)
        self.grad.copy_(gradients)
        return losses.detach()
