"""Each record's squared gradient norm over one layer's parameters, from the layer's input and the record's output
gradient, without the gradient itself: ghost clipping's arithmetic (dp-sgd-per-record='ghost',
fedsuite/privacy/per_record.py; docs/privacy-dp-sgd.md#per-record-gradients).

For a record with input a and output gradient g at a layer:
- a linear layer over one vector: the weight gradient g aᵀ has squared norm ‖g‖²‖a‖², the bias's ‖g‖²;
- a linear layer over positions t (a sequence), or a convolution over its unfolded input positions: the weight
  gradient Σ_t g_t a_tᵀ, whose squared norm is taken from the gradient itself where it has fewer entries than the
  two T × T Gram matrices (an early convolution), else as Σ_{t,t'} (a_t·a_t')(g_t·g_t') (a late one or a sequence);
  the bias's ‖Σ_t g_t‖²;
- a group or layer norm: Σ over positions of x̂·g (the weight's gradient, x̂ the normalised input) and of g (the
  bias's).
Float rounding can make a Gram-matrix term of a record whose gradient is about zero slightly negative; each layer's
term is taken at least 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.GroupNorm, nn.LayerNorm)  # exactly these types, not subclasses
OWN_PARAMETERS = {"weight", "bias"}  # a known layer's trainable parameters, by name


def plain_convolution(layer) -> bool:
    """One group, zero padding, and padding='same' only where it pads both sides alike."""
    if layer.groups != 1 or layer.padding_mode != "zeros":
        return False
    sizes = zip(layer.kernel_size, layer.dilation, strict=True)
    return layer.padding != "same" or all(d * (k - 1) % 2 == 0 for k, d in sizes)


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
    own output gradients `g` (B, …): (B,), each at least 0."""
    return _norms(layer, names, a, g).clamp_min(0)


def _norms(layer: nn.Module, names: tuple[str, ...], a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
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
    raise ValueError(f"dp-sgd-per-record='ghost': {type(layer).__name__} is not a layer ghost clipping knows")


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
