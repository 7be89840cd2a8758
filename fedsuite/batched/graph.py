"""A stacked group's local step captured once as a CUDA graph and replayed (run-config key `cuda-graphs`,
docs/running/batched.md#cuda-graphs).

One stacked step of a small model is hundreds of kernel launches, each cheap, so on a GPU the Python and launch
overhead is most of its time. A CUDA graph records the launches of one step and replays them with one call. The
first step of a round runs as usual (on a side stream, as CUDA graph capture wants its kernels warmed up there); the
second is recorded, with its minibatch in fixed buffers, and every step from the second on copies its minibatch
into those buffers and replays the recording. The kernels are the very ones of the eager step, so the numbers are
those of the stacked loop without the graph.

A recording replays tensor operations only: a stage that changes Python-side state at every step (a step
counter), reads the step's number or data block, or moves values to the host would replay wrongly. So only a
rule whose every stage is one of `REPLAYABLE` is recorded, and with no batch source of its own but fixed blocks of
one size (LoSAC's and FedSaga's: the stacked block table reads each step's blocks from a device tensor the loop
writes before the step, fedsuite/batched/stacking.py); any other, a CPU device, or a round of fewer than three steps
runs every step as usual. `not_replayable(rule)` says why.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedsuite.batched.stacking import StackedBlockTable
from fedsuite.local.adaptive import AdamStep, ControlVariatePoint
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
from fedsuite.local.variance import FixedBlocks, SoftThreshold

# Stages whose every call after the first is the same tensor operations on the same tensors (their buffers are
# made on the first call, which runs before the recording).
REPLAYABLE = (AtIterate, SharpnessAware, DualRegularisedSharpness, LookAhead, ControlVariatePoint, Prox, AddVector,
              Scale, AdamStep, SoftThreshold, StackedBlockTable)  # fmt: skip
MIN_STEPS = 3  # a recording pays for itself only when it is replayed


def not_replayable(rule: UpdateRule, device: torch.device, steps: int, batches=None) -> str | None:
    """Why the group's stacked rule is not recorded as a CUDA graph, or None. `batches`: the clients' own batch
    source (the stacked rule holds the stages only), else the rule's."""
    if device.type != "cuda":
        return "not a CUDA device"
    if steps < MIN_STEPS:
        return f"a round of {steps} steps"
    batches = rule.batches if batches is None else batches
    if isinstance(batches, FixedBlocks):
        if len({len(block) for block in batches.blocks}) > 1:
            return "its fixed blocks differ in size, so its minibatches change shape from step to step"
    elif batches is not None:
        return f"its batch source {type(batches).__name__} picks a data block per step"
    stages = [rule.point, rule.step, *rule.clipped, *rule.unclipped, *rule.after_step, *rule.proximal]
    for stage in stages:
        owner = getattr(stage, "__self__", stage)  # a bound method's object (Prox.centre_part …)
        if stage is not sgd_step and type(owner) not in REPLAYABLE:  # a subclass may keep state of its own
            return f"its stage {type(owner).__name__} changes between steps in ways a recording cannot replay"
    return None


class RecordedStep:
    """`run(k, inputs, targets)`: step k of a round, by `step(inputs, targets) → per-client losses` (module
    docstring). `failed` holds the one-line reason when the recording could not be made (the step then runs as usual
    from there on)."""

    def __init__(self, step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device: torch.device):
        self.step, self.device = step, device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.failed: str | None = None
        self._inputs = self._targets = self._loss = None

    def run(self, k: int, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.failed is not None:
            return self.step(inputs, targets)
        if k == 0 and self.graph is None:  # a kept recording (fedsuite/batched/kept_steps.py) replays step 0 too
            return self._warm_up(inputs, targets)
        if self.graph is None:
            self._record(inputs, targets)
            if self.failed is not None:
                return self.step(inputs, targets)
        self._inputs.copy_(inputs)
        self._targets.copy_(targets)
        self.graph.replay()
        return self._loss

    def _warm_up(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            loss = self.step(inputs, targets)
        torch.cuda.current_stream(self.device).wait_stream(side)
        return loss

    def _record(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        self._inputs, self._targets = inputs.clone(), targets.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._loss = self.step(self._inputs, self._targets)
        except Exception as err:  # the recording only records: nothing ran, the step runs as usual instead
            self.failed = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            return
        self.graph = graph
