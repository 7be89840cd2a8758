"""A group's recorded step kept for the whole run, not made again every round (docs/running/batched.md#cuda-graphs).

A CUDA graph replays kernels on the very tensors it was recorded with. `fedsuite.batched.loop.train_stacked` builds
new ones every round (the stacked iterate, x⁰, the stacked rule's tensors), so a graph recorded in one round cannot
serve the next, and each round paid for a step run as usual and a recording. Here the run keeps, per kind of group,
those tensors with the graph recorded on them (`KeptStep`); a later round of the same kind writes its own values
into them and replays the graph from its first step:

- the clients' x⁰ into the kept x⁰ and the kept iterate;
- the stacked rule's tensors (SCAFFOLD's c − c_i, FedDyn's duals, the Adam moments …) into the kept rule's, stage
  by stage (`refill`), and after the round the kept rule's final tensors back into the round's own stacked rule, whose
  write-back then hands each client its row as before;
- the round's minibatches into the recording's input buffers, as within a round.

A recording also fixes every number the step read as a Python value when it was made, and the shapes of its
buffers: the learning rate, the weight decay, the clip, the stages' scalars, the minibatch's shape. So a kept step
serves a group (`group_key`) only with all of them equal: the rule's signature (its stage types and scalar settings,
fedsuite/batched/stacking.py), the round's LocalSettings, the shapes and dtypes of the round's first stacked
minibatch (the number of clients and the minibatch size the clients really draw, which a small partition makes
smaller than batch-size), the model's module, the loss function and the device, and η_l. A step recorded for a new
η_l (lr-decay below 1: every round) replaces the kept one of its kind, so at most one recording per kind of group is
held. Only rules that are recorded at all (fedsuite/batched/graph.py's `not_replayable`) are kept, and a kept step
whose round raised is dropped.

Stage attributes whose names start with an underscore are scratch buffers written before they are read in every
step (SAM's saved iterate, the Adam step's direction); they stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import astuple, dataclass, replace
from typing import Any

import torch

from fedsuite.batched.stacking import RULE_FIELDS, SEQUENCES, rule_signature
from fedsuite.local.loop import LocalSettings, StepContext, UpdateRule


@dataclass
class KeptStep:
    """One kind of group's step and the tensors its recording runs on (module docstring)."""

    model: Any  # the StackedModel whose rows are the iterate
    x0: torch.Tensor
    ctx: StepContext
    rule: UpdateRule  # the stacked rule the recording reads
    loss_sum: torch.Tensor
    step: Callable  # (inputs, targets) → per-client losses, on the kept tensors
    recorded: Any  # its RecordedStep (fedsuite/batched/graph.py); None: run step by step, not kept
    oracle: Any = None  # what the point stage takes gradients from (the model, or DP-SGD's private one)


ON_CPU = False  # tests: on the CPU too, groups a recording would take keep their step, replayed as `StepOnCpu`


class StepOnCpu:
    """What stands for a recording on the CPU when ON_CPU is set: the step function of the round that made it, called
    again in every later round. It runs on that round's tensors, as a graph would, so a value a later round failed
    to write into them shows as a different result (tests/test_kept_steps.py); numbers a graph would fix, it reads
    anew (the key holds them)."""

    failed = None

    def __init__(self, step: Callable):
        self.step = step

    def run(self, k: int, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.step(inputs, targets)


class KeptSteps:
    """The kept steps of one run (the batched dispatcher holds one), by `group_key`. One per kind of group whatever
    its learning rate: a step recorded for a new η_l (lr-decay) replaces the one of the old, whose tensors and
    recording are then let go, so the kept steps hold at most one recording per kind of group."""

    def __init__(self):
        self._kept: dict[Hashable, tuple[float, KeptStep]] = {}  # kind → (η_l, its step)

    def get(self, key: tuple[Hashable, float]) -> KeptStep | None:
        kind, lr = key
        held = self._kept.get(kind)
        return held[1] if held is not None and held[0] == lr else None

    def keep(self, key: tuple[Hashable, float], kept: KeptStep) -> None:
        kind, lr = key
        self._kept[kind] = (lr, kept)

    def drop(self, key: tuple[Hashable, float]) -> None:
        self._kept.pop(key[0], None)

    def __len__(self) -> int:
        return len(self._kept)


def group_key(rules, settings: LocalSettings, inputs: torch.Tensor, targets: torch.Tensor, module,
              loss_fn) -> tuple[Hashable, float]:  # fmt: skip
    """What must be equal for a kept recording to serve a group (module docstring), as (the kind of group, η_l);
    `inputs` and `targets` are the round's first stacked minibatch (C clients, its real minibatch size)."""
    kind = (rule_signature(rules[0]), astuple(replace(settings, lr=0.0)), tuple(inputs.shape), inputs.dtype,
            tuple(targets.shape), targets.dtype, str(inputs.device), id(module), id(loss_fn))  # fmt: skip
    return kind, settings.lr


def stage_owners(rule: UpdateRule) -> list[Any]:
    """The objects that hold the rule's tensors, in field order (a bound method's object; a plain function)."""
    stages = []
    for name in RULE_FIELDS:
        value = getattr(rule, name)
        stages.extend(value if name in SEQUENCES else (value,))
    return [getattr(stage, "__self__", stage) for stage in stages]


def refill(target: UpdateRule, source: UpdateRule) -> None:
    """Write every public tensor of `source`'s stages into the same tensor of `target`'s, stage by stage (two rules
    of one signature); scratch buffers (a leading underscore) are left."""
    for into, out_of in zip(stage_owners(target), stage_owners(source), strict=True):
        if into is out_of or not hasattr(out_of, "__dict__"):
            continue
        for name, value in vars(out_of).items():
            if name.startswith("_") or not isinstance(value, torch.Tensor):
                continue
            getattr(into, name).copy_(value)
