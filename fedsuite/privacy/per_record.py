"""How DP-SGD takes the clipped sum of a batch's per-record gradients (dp-sgd-per-record,
docs/privacy-dp-sgd.md#per-record-gradients).

- `vmap` (the default): every record's gradient, by torch.func's `vmap` of `grad` over the records (each record's
  loss through `functional_call` of the module), then each clipped and the clipped ones summed
  (fedsuite/privacy/dp_sgd.py, fedsuite/batched/private.py). Any model, any loss; B × d floats a step.
- `ghost`: the norms of the records' gradients without the gradients (ghost clipping). One forward pass keeps each
  layer's input; one backward pass gives each layer's output gradient, from which `layer_norms` makes each record's
  squared gradient norm over the layer's parameters: by the layer's own per-record gradient where that is small (an
  early convolution: its output channels × its unfolded input), else from the two Gram matrices of the layer's
  positions (a late convolution, a linear layer over a sequence); a linear layer over single vectors needs neither.
  A second backward pass of the same graph, each record's output gradient scaled by its clip factor, then gives
  the clipped sum itself, with the plain step's kernels. It knows the layers of LAYERS (a convolution of one group
  with zero padding), each called once per forward pass, and needs a loss that is the mean over the batch of each
  record's own loss, as the suite's three are (fedsuite.models.networks `loss_function`); `ghost_refusal` and
  `loss_refusal` say in one line why a model or loss cannot take it. The first time a model takes a ghost step, the
  norms of its first records are checked against those records' own gradients (`norms_refusal`): a parameter used
  outside its layer's call, or weights shared between layers, would make ghost clipping under-count a norm, and the
  step is refused instead.

Both give the same clipped sum to float rounding (tests/test_per_record.py).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedsuite.models.networks import half_squared_loss, logistic_loss, loss_inputs

KEY = "dp-sgd-per-record"
METHODS = ("vmap", "ghost")
LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.GroupNorm, nn.LayerNorm)
MEAN_LOSSES = (F.cross_entropy, logistic_loss, half_squared_loss)  # each a mean over the batch of per-record losses
CHECKED_RECORDS = 2  # records whose ghost norms are checked against their own gradients, once per model and loss
TOLERANCE = 1e-4  # relative difference of a checked squared norm allowed (2e-2 under autocast's bfloat16)
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module → the losses its norms were checked for


def ghost_refusal(module: nn.Module) -> str | None:
    """Why `module` cannot take `ghost` per-record norms, in one line naming the key, the layer and the way out;
    None when it can: every trainable parameter sits in a layer of LAYERS (a convolution with one group and zero
    padding)."""
    for name, layer in module.named_modules():
        if not any(p.requires_grad for p in layer.parameters(recurse=False)):
            continue
        where = f"layer {name or '(the model itself)'} ({type(layer).__name__})"
        if not isinstance(layer, LAYERS):
            known = ", ".join(t.__name__ for t in LAYERS)
            return f"{KEY}='ghost': {where} has parameters ghost clipping does not know (it knows {known}); use {KEY}='vmap'"  # noqa: E501
        if isinstance(layer, nn.Conv1d | nn.Conv2d) and not _plain_convolution(layer):
            return (f"{KEY}='ghost': {where} has groups={layer.groups}, padding={layer.padding!r}, "
                    f"padding_mode={layer.padding_mode!r}; ghost clipping takes one group and even zero padding; "
                    f"use {KEY}='vmap'")  # fmt: skip
    return None


def _plain_convolution(layer) -> bool:
    """One group, zero padding, and padding='same' only where it pads both sides alike."""
    if layer.groups != 1 or layer.padding_mode != "zeros":
        return False
    sizes = zip(layer.kernel_size, layer.dilation, strict=True)
    return layer.padding != "same" or all(d * (k - 1) % 2 == 0 for k, d in sizes)


def loss_refusal(loss_fn) -> str | None:
    """Why `loss_fn` cannot take `ghost` norms (it is not known to be a mean of per-record losses)."""
    if loss_fn in MEAN_LOSSES:
        return None
    return (f"{KEY}='ghost': the loss {getattr(loss_fn, '__name__', loss_fn)!r} is not one the suite knows to be a "
            f"mean of per-record losses; use {KEY}='vmap'")  # fmt: skip


def ghost_clipped_sum(module: nn.Module, params: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
                      targets: torch.Tensor, clip: float) -> tuple[list[torch.Tensor], torch.Tensor]:  # fmt: skip
    """Σ over the batch's records of each record's gradient (of its own loss, at `params`: name → tensor, the
    module's trainable parameters, read and never written) scaled to L2 norm ≤ `clip` (a record inside the ball
    keeps factor 1), as one tensor per parameter in `params`'s order; and the batch's mean loss, detached."""
    refused = loss_refusal(loss_fn)
    if refused is not None:
        raise ValueError(refused)
    leaves = {name: value.detach().requires_grad_(True) for name, value in params.items()}
    layers, seen = trainable_layers(module, leaves), []

    def keep(layer, args, output):
        """The layer's input and output kept; the layer returns a copy, so that an in-place operation after it (a
        ReLU, a residual sum) changes the copy and the gradient taken at the kept output is the layer's own."""
        seen.append((layer, args[0].detach(), args[0]._version, output))
        return output.clone()

    hooks = [layer.register_forward_hook(keep) for layer in layers]
    try:
        with torch.enable_grad():
            out = functional_call(module, leaves, (inputs,))
            loss = loss_fn(*loss_inputs(out, targets))
    finally:
        for hook in hooks:
            hook.remove()
    if len({id(m) for m, _, _, _ in seen}) != len(seen):
        raise ValueError(f"{KEY}='ghost': a layer ran twice in one forward pass (shared weights); use {KEY}='vmap'")
    if any(layer_input._version != version for _, layer_input, version, _ in seen):
        raise ValueError(f"{KEY}='ghost': a layer's input was changed in place after the layer read it; "
                         f"use {KEY}='vmap'")  # fmt: skip
    grads = torch.autograd.grad(loss, [out, *(o for _, _, _, o in seen)], retain_graph=True, allow_unused=True)
    batch, exact = targets.shape[0], torch.float64 if out.dtype == torch.float64 else torch.float32
    squared = torch.zeros(batch, device=out.device, dtype=exact)
    for (layer, layer_input, _, _), output_grad in zip(seen, grads[1:], strict=True):
        if output_grad is not None:  # None: the layer's output never reached the loss
            squared += layer_norms(layer, layers[layer], layer_input.to(exact), output_grad.to(exact) * batch)
    check_once(module, leaves, loss_fn, inputs, targets, squared)
    factor = torch.clamp(clip / (squared.sqrt() + 1e-12), max=1.0).to(grads[0].dtype)
    scaled = grads[0] * (batch * factor).view(-1, *[1] * (grads[0].dim() - 1))
    summed = torch.autograd.grad(out, list(leaves.values()), grad_outputs=scaled, allow_unused=True)
    return [torch.zeros_like(leaf) if g is None else g.to(leaf.dtype)
            for g, leaf in zip(summed, leaves.values(), strict=True)], loss.detach()  # fmt: skip


def check_once(module: nn.Module, params: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
               targets: torch.Tensor, squared: torch.Tensor) -> None:  # fmt: skip
    """The first ghost step of `module` with `loss_fn`: raise `norms_refusal`'s reason, if any (module docstring)."""
    if loss_fn in _CHECKED.get(module, ()):
        return
    refused = norms_refusal(module, params, loss_fn, inputs, targets, squared)
    if refused is not None:
        raise ValueError(refused)
    _CHECKED.setdefault(module, set()).add(loss_fn)


def norms_refusal(module: nn.Module, params: dict[str, torch.Tensor], loss_fn, inputs: torch.Tensor,
                  targets: torch.Tensor, squared: torch.Tensor) -> str | None:  # fmt: skip
    """Why ghost clipping's squared norms `squared` of the batch's first CHECKED_RECORDS records cannot be trusted
    (they differ from the squared norms of those records' own gradients, taken one by one by torch.func at `params`),
    or None."""
    n = min(CHECKED_RECORDS, targets.shape[0])
    values = {name: value.detach() for name, value in params.items()}

    def record_loss(values, record, target):
        out = functional_call(module, values, (record.unsqueeze(0),))
        return loss_fn(*loss_inputs(out, target.unsqueeze(0)))

    own = vmap(grad(record_loss), in_dims=(None, 0, 0))(values, inputs[:n], targets[:n])
    want = sum(g.flatten(1).double().square().sum(1) for g in own.values())
    worst = float(((squared[:n].double() - want).abs() / want.clamp_min(1e-300)).max())
    allowed = 2e-2 if torch.is_autocast_enabled(inputs.device.type) else TOLERANCE
    if worst <= allowed:
        return None
    return (f"{KEY}='ghost': the gradient norms ghost clipping found differ from the records' own by {worst:.2g} "
            "(relative): a parameter is used outside its layer's call, or weights are shared between layers; "
            f"use {KEY}='vmap'")  # fmt: skip


def trainable_layers(module: nn.Module, leaves: dict[str, torch.Tensor]) -> dict[nn.Module, tuple[str, ...]]:
    """The module's layers that hold trainable parameters → which of their own parameters ('weight', 'bias') are
    in `leaves` (names as the module's named_parameters give them)."""
    found = {}
    for prefix, layer in module.named_modules():
        names = tuple(n for n, _ in layer.named_parameters(recurse=False) if f"{prefix}.{n}".lstrip(".") in leaves)
        if names:
            found[layer] = names
    return found


def layer_norms(layer: nn.Module, names: tuple[str, ...], a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Each record's squared gradient norm over the layer's parameters `names`, from its input `a` and the records'
    own output gradients `g` (B, …): (B,)."""
    if isinstance(layer, nn.Linear):
        return _linear(names, a, g)
    if isinstance(layer, nn.Conv1d | nn.Conv2d):
        return _conv(layer, names, a, g)
    if isinstance(layer, nn.GroupNorm):  # per channel: Σ over positions of x̂·g (weight) and of g (bias)
        normalised = F.group_norm(a, layer.num_groups, eps=layer.eps)
        channels = (a.shape[0], a.shape[1], -1)
        return _affine(names, (normalised * g).reshape(channels).sum(2), g.reshape(channels).sum(2))
    if isinstance(layer, nn.LayerNorm):  # per normalised entry: Σ over the leading positions
        normalised = F.layer_norm(a, layer.normalized_shape, eps=layer.eps)
        rows = (a.shape[0], -1, *layer.normalized_shape)
        weight, bias = (normalised * g).reshape(rows).sum(1), g.reshape(rows).sum(1)
        return _affine(names, weight.flatten(1), bias.flatten(1))
    raise ValueError(ghost_refusal(layer) or f"{KEY}='ghost': {type(layer).__name__} is not a layer it knows")


def _affine(names, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Each record's squared norm of its (B, n) weight and bias gradients, those of `names` only."""
    out = torch.zeros(weight.shape[0], device=weight.device, dtype=weight.dtype)
    if "weight" in names:
        out += weight.square().sum(1)
    if "bias" in names:
        out += bias.square().sum(1)
    return out


def _linear(names, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """A linear layer over vectors (B, in) or sequences (B, …, in): per record the weight gradient Σ_t g_t a_tᵀ."""
    if a.dim() == 2:  # one position: the gradient g aᵀ has norm ‖g‖·‖a‖
        out = torch.zeros(a.shape[0], device=a.device, dtype=a.dtype)
        if "weight" in names:
            out += a.square().sum(1) * g.square().sum(1)
        return out + g.square().sum(1) if "bias" in names else out
    return _positions(names, a.flatten(1, -2), g.flatten(1, -2))


def _conv(layer, names, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """A convolution: its unfolded input (B, positions, in·k) against its output gradient (B, positions, out)."""
    kernel, dilation, padding, stride = layer.kernel_size, layer.dilation, layer.padding, layer.stride
    if isinstance(padding, str):  # 'same' or 'valid': the padding the layer applied, both sides alike
        padding = tuple(d * (k - 1) // 2 if padding == "same" else 0 for k, d in zip(kernel, dilation, strict=True))
    if isinstance(layer, nn.Conv1d):  # as a 2-D convolution of height 1
        a, g = a.unsqueeze(2), g.unsqueeze(2)
        kernel, dilation, padding, stride = (1, *kernel), (1, *dilation), (0, *padding), (1, *stride)
    unfolded = F.unfold(a, kernel, dilation=dilation, padding=padding, stride=stride).transpose(1, 2)
    return _positions(names, unfolded, g.flatten(2).transpose(1, 2))


def _positions(names, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per record, ‖Σ_t g_t a_tᵀ‖² over positions t (a: (B, T, in), g: (B, T, out)) and the bias's ‖Σ_t g_t‖²: by
    the (out × in) per-record gradient when it has fewer entries than the two T × T Gram matrices, else from them."""
    out = torch.zeros(a.shape[0], device=a.device, dtype=a.dtype)
    if "weight" in names:
        positions, width, height = a.shape[1], a.shape[2], g.shape[2]
        if width * height <= positions * positions:
            out += torch.bmm(g.transpose(1, 2), a).square().sum((1, 2))
        else:
            out += (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
    if "bias" in names:
        out += g.sum(1).square().sum(1)
    return out
