"""A FlatModel's module over C clients' parameters at once: rows of a (C, d) matrix, inputs (C, B, …), per-client
losses (C,) and gradients (C, d) from torch.func (`functional_call`, `vmap`, `grad_and_value`).

It offers what the loop's gradient points use of a FlatModel (`x`, `grad`, `loss_and_grad`), so the same point
stages (fedsuite/local/loop.py, fedsuite/local/adaptive.py) run on it. A model with buffers (BatchNorm statistics) is
not batchable: its statistics are per client and updated by the forward pass.
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad_and_value, vmap

from fedsuite.batched.notice import BUFFERS
from fedsuite.models.networks import FlatModel, loss_inputs, trainable


def unbatchable_model(model: FlatModel) -> str | None:
    """Why `model` cannot be stacked, in a few words, or None."""
    if model.buffers.numel():
        return BUFFERS
    return None


class StackedModel:
    """C copies of `model`'s module as rows of `x` (C, d); `grad` (C, d) holds the last per-client gradients.

    The gradient is taken with respect to each parameter's (C, …) view of `x`, not the flat rows: slicing a flat row
    inside the differentiated function would make every parameter's backward write a whole (C, d) matrix."""

    def __init__(self, model: FlatModel, clients: int):
        self.module, self.autocast = model.module, model.autocast
        names = {id(p): name for name, p in model.module.named_parameters()}
        self._layout = [(names[id(p)], tuple(p.shape)) for p in trainable(model.module)]
        dim = sum(math.prod(shape) for _, shape in self._layout)
        self.x = torch.empty((clients, dim), dtype=model.x.dtype, device=model.x.device)
        self.grad = torch.zeros_like(self.x)
        self._gradients = {}  # loss_fn → its vmapped gradient function
        self._params = self._views()  # x is only ever updated in place, so the views stay valid

    @property
    def parameters(self) -> dict[str, torch.Tensor]:
        """Each trainable parameter's (C, *shape) view into `x`, by name (functional_call's dict, per client row)."""
        return self._params

    @property
    def layout(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of each trainable parameter, in the order of a row of `x`."""
        return self._layout

    def _views(self) -> dict[str, torch.Tensor]:
        """Each trainable parameter of every client: a (C, *shape) view into `x`."""
        params, offset, clients = {}, 0, self.x.shape[0]
        for name, shape in self._layout:
            n = math.prod(shape)
            params[name] = self.x[:, offset : offset + n].view(clients, *shape)
            offset += n
        return params

    def _gradient(self, loss_fn):
        if loss_fn not in self._gradients:
            module, autocast = self.module, self.autocast == "bf16"

            def loss(params, inputs, targets):
                with torch.autocast(inputs.device.type, dtype=torch.bfloat16, enabled=autocast):
                    out = functional_call(module, params, (inputs,))
                return loss_fn(*loss_inputs(out, targets))

            self._gradients[loss_fn] = vmap(grad_and_value(loss))
        return self._gradients[loss_fn]

    def loss_and_grad(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each client's loss at its row of `x` on its minibatch, (C,) detached; the gradients overwrite `grad`."""
        gradients, losses = self._gradient(loss_fn)(self._params, inputs, targets)
        clients = self.x.shape[0]
        torch.cat([gradients[name].reshape(clients, -1) for name, _ in self._layout], dim=1, out=self.grad)
        return losses.detach()
