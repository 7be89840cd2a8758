"""One stacked update rule from the per-client rules of a group (docs/running/batched.md).

Every client's stages must be of the same types with equal scalar settings; the tensors they hold (SCAFFOLD's
c − c_i, FedDyn's duals, FedMIM's shift, the Adam moments …) are stacked into (C, d) matrices, copies, so a client's
own stages are untouched while the group trains. After the loop, `StackedRule.write_back` copies each row of the
stages that end with something the uplink reads (the Adam moments, FAdamGT's gradient sum) into that client's own
stage. The stages themselves are fedsuite.local.loop's, fedsuite.local.adaptive's and fedsuite.local.variance's soft
threshold, which work on (d,) and (C, d) alike, and `StackedBlockTable`, LoSAC's and FedSaga's block table for a cohort
(each client trains on its own block j at a step); the nuclear-norm prox (an SVD per matrix) is not stacked.

`rule_signature(rule)` is what must be equal for two clients to stack (types and scalar settings), or a one-line
reason why the rule cannot be stacked at all (a stage this module does not know, such as a plug-in's own).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fedsuite.local.adaptive import AdamStep, ControlVariatePoint, GradientSum
from fedsuite.local.loop import (
    AddVector,
    AtIterate,
    DualRegularisedSharpness,
    LookAhead,
    Prox,
    Scale,
    SharpnessAware,
    UpdateRule,
    sgd_step,
)
from fedsuite.local.variance import BlockTable, FixedBlocks, SoftThreshold


class NotStackable(ValueError):
    """A group's rules cannot be stacked; the message says why in one line."""


def _stack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack(list(tensors))


def _fresh_sum(stages: Sequence[GradientSum]) -> None:
    if any(s.total is not None or s.count for s in stages):
        raise NotStackable("a GradientSum that has already recorded steps")


def _stack_gradient_sum(stages: Sequence[GradientSum]):
    _fresh_sum(stages)
    stacked = GradientSum(stages[0].weight_decay)

    def write_back() -> None:
        for row, stage in enumerate(stages):
            stage.total, stage.count = stacked.total[row].clone(), stacked.count

    return stacked, write_back


def _stack_adam(stages: Sequence[AdamStep]):
    first = stages[0]
    stacked = AdamStep(_stack([s.v for s in stages]), first.beta1, first.beta2, first.eps)
    stacked.m.copy_(_stack([s.m for s in stages]))
    stacked.vhat.copy_(_stack([s.vhat for s in stages]))

    def write_back() -> None:
        for row, stage in enumerate(stages):
            stage.m.copy_(stacked.m[row])
            stage.v.copy_(stacked.v[row])
            stage.vhat.copy_(stacked.vhat[row])

    return stacked, write_back


def _stack_prox(stages: Sequence[Prox]):
    centres = [s.centre for s in stages]
    return Prox(stages[0].mu, None if centres[0] is None else _stack(centres)), None


def being_recorded(tensor: torch.Tensor) -> bool:
    """Whether the step that reads `tensor` is being recorded as a CUDA graph now (nothing may come from the host)."""
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


class StackedBlockTable:
    """fedsuite.local.variance.BlockTable over (C, d) rows: `table` (C, M, d), `estimate` and `change` (C, d); at each
    step row c reads and writes its own block ctx.block[c], with BlockTable's operations in BlockTable's order.

    The step's blocks are read from a tensor on the device (`load_blocks`), written before each step from outside the
    step, so that a recording of the step (fedsuite/batched/graph.py) replays with each step's own blocks: the loop
    loads them before every step, and a step run as usual loads them itself too (never while being recorded)."""

    def __init__(self, stages: Sequence[BlockTable]):
        self.table = torch.stack([_stack(stage.table) for stage in stages])
        self.estimate = _stack([stage.estimate for stage in stages])
        self.change = _stack([stage.change for stage in stages])
        self.scale, self.blocks = stages[0].scale, len(stages[0].table)
        self._rows = torch.arange(len(stages), device=self.table.device)
        self._blocks = torch.zeros(len(stages), dtype=torch.long, device=self.table.device)  # the step's j per row

    def load_blocks(self, blocks: Sequence[int]) -> None:
        """The step's block of each row, written into the device tensor the step reads."""
        self._blocks.copy_(torch.as_tensor(blocks, dtype=torch.long))

    def __call__(self, d: torch.Tensor, ctx) -> None:
        if ctx.block is None:
            raise ValueError("BlockTable needs a block source (FixedBlocks) as the rule's batches")
        if not being_recorded(d):
            self.load_blocks(ctx.block)
        at = (self._rows, self._blocks)
        diff = torch.sub(d, self.table[at])  # G_j(x) − y_j, row by row
        self.table[at] = d.to(self.table.dtype)  # as y.copy_(d) casts
        d.copy_(diff).add_(self.estimate, alpha=1.0 / self.scale)
        self.estimate.add_(diff, alpha=1.0 / self.blocks)
        self.change.add_(diff, alpha=1.0 / self.blocks)


def _stack_dual_sharpness(stages: Sequence[DualRegularisedSharpness]):
    first = stages[0]
    duals, corrections = _stack([s.dual for s in stages]), _stack([s.correction for s in stages])
    stacked = DualRegularisedSharpness(first.rho, duals, corrections, first.eps)

    def write_back() -> None:  # FedSMOO's uplink reads each client's final ν_i from its own stage
        for row, stage in enumerate(stages):
            stage.dual.copy_(stacked.dual[row])

    return stacked, write_back


def _stack_block_table(stages: Sequence[BlockTable]):
    stacked = StackedBlockTable(stages)

    def write_back() -> None:
        for row, stage in enumerate(stages):
            for j, y in enumerate(stage.table):
                y.copy_(stacked.table[row, j])
            stage.estimate.copy_(stacked.estimate[row])
            stage.change.copy_(stacked.change[row])

    return stacked, write_back


@dataclass(frozen=True)
class _Kind:
    """How one stage type stacks: `settings` (its scalars, which must be equal), `stack` (stages → (stacked stage,
    write_back or None))."""

    settings: Callable[[Any], tuple]
    stack: Callable[[Sequence[Any]], tuple[Any, Callable[[], None] | None]]


KINDS: dict[type, _Kind] = {
    AtIterate: _Kind(lambda s: (), lambda ss: (AtIterate(), None)),
    SharpnessAware: _Kind(
        lambda s: (s.rho, s.mix, s.eps), lambda ss: (SharpnessAware(ss[0].rho, ss[0].mix, ss[0].eps), None)
    ),
    DualRegularisedSharpness: _Kind(lambda s: (s.rho, s.eps), _stack_dual_sharpness),
    LookAhead: _Kind(lambda s: (), lambda ss: (LookAhead(_stack([s.shift for s in ss])), None)),
    ControlVariatePoint: _Kind(lambda s: (), lambda ss: (ControlVariatePoint(_stack([s.anchor for s in ss])), None)),
    Prox: _Kind(lambda s: (s.mu, s.centre is None), _stack_prox),
    AddVector: _Kind(lambda s: (s.scale,), lambda ss: (AddVector(_stack([s.vector for s in ss]), ss[0].scale), None)),
    Scale: _Kind(lambda s: (s.factor,), lambda ss: (Scale(ss[0].factor), None)),
    GradientSum: _Kind(lambda s: (s.weight_decay,), _stack_gradient_sum),
    AdamStep: _Kind(lambda s: (s.beta1, s.beta2, s.eps), _stack_adam),
    SoftThreshold: _Kind(lambda s: (s.lam,), lambda ss: (SoftThreshold(ss[0].lam), None)),
    BlockTable: _Kind(lambda s: (s.scale, len(s.table)), _stack_block_table),
}
FUNCTIONS = (sgd_step,)  # plain functions that hold nothing: the same function serves the stack


def _owner(stage: Any) -> tuple[Any, str | None]:
    """(the object that holds the stage's tensors, the method name when the stage is its bound method)."""
    if inspect.ismethod(stage):
        return stage.__self__, stage.__func__.__name__
    return stage, None


def stage_signature(stage: Any) -> tuple:
    """The stage's type, method and scalar settings; NotStackable when this module does not know it."""
    if any(stage is f for f in FUNCTIONS):
        return ("function", stage.__name__)
    owner, method = _owner(stage)
    kind = KINDS.get(type(owner))
    if kind is None:
        name = type(owner).__name__ if method is None else f"{type(owner).__name__}.{method}"
        raise NotStackable(f"its stage {name} is not one the stacked loop knows")
    return (type(owner).__qualname__, method, kind.settings(owner))


RULE_FIELDS = ("point", "clipped", "unclipped", "step", "after_step", "proximal")
SEQUENCES = ("clipped", "unclipped", "after_step", "proximal")


def rule_signature(rule: UpdateRule) -> tuple:
    """What must be equal for rules to stack; NotStackable naming the stage when one is unknown."""
    signature = []
    for name in RULE_FIELDS:
        value = getattr(rule, name)
        stages = tuple(value) if name in SEQUENCES else (value,)
        signature.append((name, tuple(stage_signature(stage) for stage in stages)))
    if rule.batches is not None and not isinstance(rule.batches, FixedBlocks):
        raise NotStackable(f"its batch source {type(rule.batches).__name__} is not one the stacked loop knows")
    return tuple(signature)


@dataclass
class StackedRule:
    rule: UpdateRule  # the group's stages over (C, d) rows
    write_backs: list[Callable[[], None]] = field(default_factory=list)

    def write_back(self) -> None:
        """Each client's own stages take their row of the stacked stages' final tensors."""
        for write in self.write_backs:
            write()


def stack_rules(rules: Sequence[UpdateRule]) -> StackedRule:
    """The group's rules as one stacked rule (module docstring); NotStackable when their signatures differ."""
    signatures = {rule_signature(rule) for rule in rules}
    if len(signatures) > 1:
        raise NotStackable("the clients' rules differ in their stages or settings")
    stacked: dict[tuple[int, ...], Any] = {}  # one per tuple of client objects: a shared stage stays shared
    write_backs: list[Callable[[], None]] = []

    def stack(stages: Sequence[Any]) -> Any:
        if any(stages[0] is f for f in FUNCTIONS):
            return stages[0]
        owners = [_owner(stage)[0] for stage in stages]
        method = _owner(stages[0])[1]
        key = tuple(id(owner) for owner in owners)
        if key not in stacked:
            stacked[key], write_back = KINDS[type(owners[0])].stack(owners)
            if write_back is not None:
                write_backs.append(write_back)
        return stacked[key] if method is None else getattr(stacked[key], method)

    fields = {}
    for name in RULE_FIELDS:
        if name in SEQUENCES:
            fields[name] = tuple(stack(column) for column in zip(*(getattr(r, name) for r in rules), strict=True))
        else:
            fields[name] = stack([getattr(r, name) for r in rules])
    return StackedRule(UpdateRule(**fields), write_backs)
