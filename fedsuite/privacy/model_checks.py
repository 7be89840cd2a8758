"""The privacy refusals that only the built model shows, one line each, before any training (docs/privacy.md, Which
options each algorithm allows): `simulation.run --check` and the launcher's preflight, the ServerApp before it claims
a results folder, and the clients themselves all ask here.

- client-level DP (dp != 'off') with buffers='average' and a model with floating-point buffers (BatchNorm's running
  statistics): the buffers would travel to the server without clip or noise;
- DP-SGD with BatchNorm layers: their batch statistics mix the records of a batch, so no per-record gradient exists;
- DP-SGD with dp-sgd-per-record='ghost' and a trainable parameter outside the layers ghost clipping knows
  (fedsuite/privacy/per_record.py).
"""

from __future__ import annotations

from torch import nn

from fedsuite.models.networks import float_buffers
from fedsuite.privacy.per_record import ghost_refusal


def batch_norm_layers(module: nn.Module) -> list[str]:
    """The names of the BatchNorm layer types in `module`, sorted."""
    return sorted({type(m).__name__ for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)})


def averaged_buffers_refusal(mode: str, model: str) -> str:
    return (f"dp={mode!r}: model={model!r} has buffers (BatchNorm statistics) that buffers='average' would upload "
            "without clip or noise; set buffers='local'")  # fmt: skip


def batch_norm_refusal(model: str, layers: list[str]) -> str:
    return (f"dp-sgd=true: model={model!r} has {', '.join(layers)} layers, whose batch statistics mix records, so it "
            "has no per-record gradients; use a model without BatchNorm (GroupNorm or LayerNorm, e.g. "
            "resnet18-gn)")  # fmt: skip


def model_refusals(cfg, module: nn.Module) -> list[str]:
    """The lines refusing `cfg` (a fedsuite.config.run_config.Config) with this built model; none when it can run."""
    errors = []
    if cfg.privacy.on and cfg["buffers"] == "average" and float_buffers(module):
        errors.append(averaged_buffers_refusal(cfg.privacy.mode, cfg.model))
    if cfg["dp-sgd"] and (layers := batch_norm_layers(module)):
        errors.append(batch_norm_refusal(cfg.model, layers))
    if cfg["dp-sgd"] and cfg["dp-sgd-per-record"] == "ghost" and (refused := ghost_refusal(module)):
        errors.append(refused)
    return errors
