"""How DP-SGD takes the clipped sum of a batch's per-record gradients (dp-sgd-per-record,
docs/privacy-dp-sgd.md#per-record-gradients).

- `vmap` (the default): every record's gradient, by torch.func's `vmap` of `grad` over the records (each record's
  loss through `functional_call` of the module), then each clipped and the clipped ones summed
  (fedsuite/privacy/dp_sgd.py, fedsuite/batched/private.py). Any model, any loss; B × d floats a step.
- `ghost`: the norms of the records' gradients without the gradients (ghost clipping). One forward pass keeps each
  layer's input and gives each record's own loss (the loss of a batch of one, as `vmap` takes it); one backward pass
  of their sum gives each layer's output gradient, from which fedsuite/privacy/layer_norms.py makes each record's
  squared gradient norm over the layer's parameters. With the norms, each record's clip factor
  min(1, C / norm) is known, and a second backward pass of the same graph, each record's loss weighted by its
  factor, gives the clipped sum itself with the plain step's kernels.

Ghost clipping counts a parameter's gradient only where it flows through its own layer's call, so it takes only
models whose every trainable parameter is the `weight` or `bias` of a layer of exactly a type of LAYERS (a
convolution of one group with zero padding), with no hook of the user's on it (`ghost_refusal`), and no autocast
(its bfloat16 backward pass could let a record's share pass C by rounding; `vmap` clips float32 gradients). What
the types cannot show (a weight used again outside its layer's call, weights shared between layers, a layer called
through `.forward`) is caught on a model's first ghost step: the ghost norms of its first records, recomputed in
the model's own precision, must match those records' own gradients (`check_once`), or the step is refused.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from fedsuite.models.networks import loss_inputs
from fedsuite.privacy.layer_norms import LAYERS, OWN_PARAMETERS, layer_norms, plain_convolution, trainable_layers

KEY = "dp-sgd-per-record"
METHODS = ("vmap", "ghost")
CHECKED_RECORDS = 16  # records of a model's first ghost step whose norms are checked against their own gradients
TOLERANCE = 1e-4  # relative difference allowed between a checked squared norm and the record's own
AUTOCAST_REFUSAL = (f"{KEY}='ghost' takes no autocast: its bfloat16 backward pass could let a record's share of the "
                    f"sum pass the clip by rounding; use autocast='none' or {KEY}='vmap'")  # fmt: skip
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module → the losses its norms were checked for


def ghost_refusal(module: nn.Module) -> str | None:
    """Why `module` cannot take ghost clipping (module docstring), in one line naming the key, the layer and the way
    out; None when it can."""
    known = ", ".join(t.__name__ for t in LAYERS)
    for name, layer in module.named_modules():
        own = [n for n, p in layer.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        where = f"{KEY}='ghost': layer {name or '(the model itself)'} ({type(layer).__name__})"
        if type(layer) not in LAYERS:
            return f"{where} has parameters ghost clipping does not know (it knows {known}); use {KEY}='vmap'"
        if not set(own) <= OWN_PARAMETERS:
            return f"{where} has parameters {', '.join(sorted(set(own) - OWN_PARAMETERS))}; use {KEY}='vmap'"
        if layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks:
            return f"{where} has hooks of its own, which could change what it computes; use {KEY}='vmap'"
        if isinstance(layer, nn.Conv1d | nn.Conv2d) and not plain_convolution(layer):
            return (f"{where} has groups={layer.groups}, padding={layer.padding!r}, padding_mode="
                    f"{layer.padding_mode!r}; ghost clipping takes one group and even zero padding; "
                    f"use {KEY}='vmap'")  # fmt: skip
    return None


def record_losses(loss_fn, out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each record's own loss, (B,): the loss of a batch of one, as the `vmap` method takes it."""
    return vmap(lambda o, t: loss_fn(*loss_inputs(o.unsqueeze(0), t.unsqueeze(0))))(out, targets)


def ghost_clipped_sum(module: nn.Module, params: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
                      targets: torch.Tensor, clip: float) -> tuple[list[torch.Tensor], torch.Tensor]:  # fmt: skip
    """Σ over the batch's records of each record's gradient (of its own loss, at `params`: name → tensor, the
    module's trainable parameters, read and never written) scaled to L2 norm ≤ `clip` (a record inside the ball
    keeps factor 1), as one tensor per parameter in `params`'s order; and the records' mean loss, detached."""
    if torch.is_autocast_enabled(inputs.device.type):
        raise ValueError(AUTOCAST_REFUSAL)
    leaves = {name: value.detach().requires_grad_(True) for name, value in params.items()}
    losses, squared = ghost_norms(module, leaves, loss_fn, inputs, targets, keep_graph=True)
    check_once(module, leaves, loss_fn, inputs, targets)
    factor = torch.clamp(clip / (squared.sqrt() + 1e-12), max=1.0).to(losses.dtype)
    summed = torch.autograd.grad(losses, list(leaves.values()), grad_outputs=factor, allow_unused=True)
    return [torch.zeros_like(leaf) if g is None else g.to(leaf.dtype)
            for g, leaf in zip(summed, leaves.values(), strict=True)], losses.mean().detach()  # fmt: skip


def ghost_norms(module: nn.Module, leaves: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
                targets: torch.Tensor, keep_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(each record's loss, (B,), with its graph when `keep_graph`; each record's squared gradient norm at `leaves`,
    (B,)), by one forward and one backward pass (module docstring)."""
    layers, seen = trainable_layers(module, leaves), []

    def keep(layer, args, output):
        """The layer's input and output kept; the layer returns a copy, so that an in-place operation after it (a
        ReLU, a residual sum) changes the copy and the gradient taken at the kept output is the layer's own."""
        seen.append((layer, args[0].detach(), args[0]._version, output))
        return output.clone()

    hooks = [layer.register_forward_hook(keep) for layer in layers]
    try:
        with torch.enable_grad():
            losses = record_losses(loss_fn, functional_call(module, leaves, (inputs,)), targets)
    finally:
        for hook in hooks:
            hook.remove()
    if len({id(m) for m, _, _, _ in seen}) != len(seen):
        raise ValueError(f"{KEY}='ghost': a layer ran twice in one forward pass (shared weights); use {KEY}='vmap'")
    if any(layer_input._version != version for _, layer_input, version, _ in seen):
        raise ValueError(f"{KEY}='ghost': a layer's input was changed in place after the layer read it; "
                         f"use {KEY}='vmap'")  # fmt: skip
    grads = torch.autograd.grad(losses.sum(), [o for _, _, _, o in seen], retain_graph=keep_graph, allow_unused=True)
    exact = torch.float64 if losses.dtype == torch.float64 else torch.float32
    squared = torch.zeros(targets.shape[0], device=inputs.device, dtype=exact)
    for (layer, layer_input, _, _), output_grad in zip(seen, grads, strict=True):
        if output_grad is not None:  # None: the layer's output never reached the loss
            squared += layer_norms(layer, layers[layer], layer_input.to(exact), output_grad.to(exact))
    return (losses if keep_graph else losses.detach()), squared


def check_once(module: nn.Module, params: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
               targets: torch.Tensor) -> None:  # fmt: skip
    """The first ghost step of `module` with `loss_fn`: raise `norms_refusal`'s reason, if any (module docstring)."""
    if loss_fn in _CHECKED.get(module, ()):
        return
    refused = norms_refusal(module, params, loss_fn, inputs, targets)
    if refused is not None:
        raise ValueError(refused)
    _CHECKED.setdefault(module, set()).add(loss_fn)


def norms_refusal(module: nn.Module, params: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
                  targets: torch.Tensor) -> str | None:  # fmt: skip
    """Why ghost clipping's squared norms of the batch's first CHECKED_RECORDS records at `params` cannot be trusted
    (they differ from the squared norms of those records' own gradients, taken one by one by torch.func), or None."""
    n = min(CHECKED_RECORDS, targets.shape[0])
    values = {name: value.detach() for name, value in params.items()}
    leaves = {name: value.clone().requires_grad_(True) for name, value in values.items()}
    _, ghost = ghost_norms(module, leaves, loss_fn, inputs[:n], targets[:n])

    def record_loss(values, record, target):
        return record_losses(loss_fn, functional_call(module, values, (record.unsqueeze(0),)), target.unsqueeze(0))[0]

    own = vmap(grad(record_loss), in_dims=(None, 0, 0))(values, inputs[:n], targets[:n])
    want = sum(g.flatten(1).double().square().sum(1) for g in own.values())
    scale = want.clamp_min(1e-9 * float(want.max()) + 1e-300)  # a record with about no gradient: against the batch's
    worst = float(((ghost.double() - want).abs() / scale).max())
    if worst <= TOLERANCE:
        return None
    return (f"{KEY}='ghost': the gradient norms ghost clipping found differ from the records' own by {worst:.2g} "
            "(relative): a parameter is used outside its layer's call, or weights are shared between layers; "
            f"use {KEY}='vmap'")  # fmt: skip
