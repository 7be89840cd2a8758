"""Ghost clipping inside the stacked step (dp-sgd-per-record='ghost' with batch-clients=true,
docs/privacy-dp-sgd.md#per-record-gradients).

The clipped sum of each client's per-record gradients, for every client of a stacked group at once and without the
C × B × d per-record gradients, in two `vmap`s over the clients (torch.func):

1. the sum of each client's record losses (each the loss of a batch of one) at its row of the iterate,
   differentiated with respect to a zero "probe" added to the output of every layer that holds trainable
   parameters: the gradients at the probes are the layers' output gradients, and the layers' inputs come out beside
   them. No weight gradient is taken. From each layer's input and output gradient
   `fedsuite.privacy.layer_norms.layer_norms` makes each record's squared gradient norm over the
   layer's parameters; their sum over the layers is the record's squared norm, and its clip factor
   min(1, C_s / norm) follows.
2. each client's sum over its records of factor × record loss, differentiated with respect to its parameters: the
   clipped sum itself, by the plain stacked step's kernels.

The same clipped sums as the `vmap` method's to float rounding (tests/test_per_record.py); the probes' shapes come
from one forward pass of the first client, once per shape of minibatch. The first step checks the first client's
first records' norms against their own gradients (fedsuite.privacy.per_record.check_once), which also catches a
layer's input changed in place after the layer read it (the one-client path checks that directly; the suite's
models do not do it).
"""

from __future__ import annotations

from functools import partial

import torch
from torch.func import functional_call, grad, vmap

from fedsuite.batched.model import StackedModel
from fedsuite.privacy.layer_norms import layer_norms, trainable_layers
from fedsuite.privacy.per_record import AUTOCAST_REFUSAL, check_once, record_losses


class StackedGhost:
    """Ghost clipping of one loss over a stacked group's clients (module docstring)."""

    def __init__(self, model: StackedModel, loss_fn):
        if model.autocast != "none":
            raise ValueError(AUTOCAST_REFUSAL)
        self.model, self.loss_fn = model, loss_fn
        self._first = {name: view[0] for name, view in model.parameters.items()}  # the first client's, views of x
        self.layers = list(trainable_layers(model.module, self._first).items())  # (layer, its trainable names)
        self._outputs: dict[tuple, dict[int, tuple[torch.Size, torch.dtype]]] = {}  # minibatch shape → probes'
        self._norms = vmap(grad(self._summed_loss, argnums=1, has_aux=True))
        self._sums = vmap(grad(self._weighted_loss))

    def clipped_sums(self, inputs: torch.Tensor, targets: torch.Tensor, clip: float) -> torch.Tensor:
        """Each client's Σ over its records of clip(record gradient) into its row of the model's `grad` (C, d);
        returns each client's mean record loss, (C,) detached."""
        model = self.model
        clients, batch = targets.shape[:2]
        probes = {index: torch.zeros((clients, *shape), dtype=dtype, device=inputs.device)
                  for index, (shape, dtype) in self._probe_shapes(inputs).items()}  # fmt: skip
        output_grads, (kept, losses) = self._norms(model.parameters, probes, inputs, targets)
        exact = torch.float64 if model.x.dtype == torch.float64 else torch.float32
        squared = torch.zeros(clients * batch, dtype=exact, device=inputs.device)
        for index, (layer, names) in enumerate(self.layers):
            if index in kept:
                layer_input, output_grad = kept[index].flatten(0, 1), output_grads[index].flatten(0, 1)
                squared += layer_norms(layer, names, layer_input.to(exact), output_grad.to(exact))
        self._check(inputs, targets)
        factor = torch.clamp(clip / (squared.sqrt() + 1e-12), max=1.0).view(clients, batch)
        sums = self._sums(model.parameters, factor.to(model.x.dtype), inputs, targets)
        torch.cat([sums[name].reshape(clients, -1) for name, _ in model.layout], dim=1, out=model.grad)
        return losses.mean(dim=1)

    def _check(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """The first client's first records' norms against their own gradients, once per model and loss
        (fedsuite.privacy.per_record.check_once)."""
        check_once(self.model.module, self._first, self.loss_fn, inputs[0], targets[0])

    # ---- one client's functions, vmapped over the group ---------------------------------------------------------
    def _summed_loss(self, params, probes, inputs, targets):
        kept: dict[int, torch.Tensor] = {}
        losses = record_losses(self.loss_fn, self._forward(params, probes, kept, inputs), targets)
        return losses.sum(), (kept, losses.detach())

    def _weighted_loss(self, params, weights, inputs, targets):
        return (record_losses(self.loss_fn, self._forward(params, None, None, inputs), targets) * weights).sum()

    def _forward(self, params, probes, kept, inputs) -> torch.Tensor:
        handles = [layer.register_forward_hook(partial(_probed, index, probes, kept))
                   for index, (layer, _) in enumerate(self.layers)]  # fmt: skip
        try:
            return functional_call(self.model.module, params, (inputs,))
        finally:
            for handle in handles:
                handle.remove()

    def _probe_shapes(self, inputs: torch.Tensor) -> dict[int, tuple[torch.Size, torch.dtype]]:
        """Each called layer's output shape and dtype for one client's minibatch of this shape, by one forward pass
        of the first client (once per shape)."""
        key = (tuple(inputs.shape[1:]), inputs.dtype)
        if key not in self._outputs:
            shapes: dict[int, tuple[torch.Size, torch.dtype]] = {}

            def shape_of(index, layer, args, output):
                shapes[index] = (output.shape, output.dtype)

            handles = [layer.register_forward_hook(partial(shape_of, index))
                       for index, (layer, _) in enumerate(self.layers)]  # fmt: skip
            try:
                with torch.no_grad():
                    functional_call(self.model.module, self._first, (inputs[0],))
            finally:
                for handle in handles:
                    handle.remove()
            self._outputs[key] = shapes
        return self._outputs[key]


def _probed(index: int, probes, kept, layer, args, output):
    """A layer's forward hook: its input kept (when `kept` is given), its output plus its zero probe (when `probes`
    are given), so that the gradient at the probe is the gradient at the layer's output."""
    if kept is not None:
        kept[index] = args[0]
    return output if probes is None else output + probes[index]
