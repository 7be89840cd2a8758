"""`train_stacked`: the steps of `fedsuite.local.loop.train_local` for C clients at once.

Each client draws its minibatches (and their augmentation) from its own batch source and generator, exactly as
`train_local` would, so it sees the same samples in the same order (in iteration mode the whole round at once:
fedsuite/batched/draws.py); the minibatches are stacked (C, B, …) and one
vmapped gradient (fedsuite/batched/model.py) serves the whole group. The rest of the step is `fedsuite.local.loop.move`
on the (C, d) rows: clipping and SAM's normalisation use each client's own (row) norm. Losses are summed per client.
The clients must share K_i and every step's minibatch size (fedsuite/batched/grouping.py). With DP-SGD (`privates`)
the oracle is a `StackedPrivateModel` (fedsuite/batched/private.py): each client's gradients are its private ones,
counted in its own ledger.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fedsuite.batched import kept_steps
from fedsuite.batched.draws import drawable, drawn_round
from fedsuite.batched.graph import RecordedStep, not_replayable
from fedsuite.batched.kept_steps import KeptStep, KeptSteps, group_key, refill, stage_owners
from fedsuite.batched.model import StackedModel
from fedsuite.batched.private import StackedPrivateModel, ledgers_kept_on_failure
from fedsuite.batched.stacking import stack_rules
from fedsuite.local.loop import LocalData, LocalResult, LocalSettings, StepContext, UpdateRule, move, plain_batches
from fedsuite.models.networks import FlatModel


def train_stacked(
    model: FlatModel,
    x0s: Sequence[torch.Tensor],
    datas: Sequence[LocalData],
    loss_fn,
    rules: Sequence[UpdateRule],
    *,
    generators: Sequence[torch.Generator],
    settings: LocalSettings | None = None,
    cuda_graphs: bool = False,
    on_graph_failure: Callable[[str], None] | None = None,
    on_not_recorded: Callable[[str], None] | None = None,
    privates: Sequence[Any] | None = None,
    kept: KeptSteps | None = None,
    **keywords: Any,
) -> list[LocalResult]:
    """One LocalResult per client, its x a row of the stacked iterate. The clients share `settings` (η_l, K_i, E, B,
    weight decay, clipping, loss reduction: `LocalSettings.of_round`; or, as before settings=, those as keywords
    named like its fields). The clients' own rules take their final stage tensors (write-back) only once the loop
    has run to the end; `model` lends its module, never its x.
    `cuda_graphs`: on a CUDA device, record the step once and replay it (fedsuite/batched/graph.py) where the rule
    allows; `on_graph_failure(reason)` hears of a recording that could not be made, `on_not_recorded(reason)` of a
    CUDA group whose rule the recording does not take (it runs step by step).
    `privates`: each client's fedsuite.privacy.dp_sgd.DpSgd (dp-sgd=true), whose private gradients the oracle takes
    (fedsuite/batched/private.py); None: the plain gradients. A failed attempt leaves their ledgers as they were.
    `kept`: the run's kept steps (fedsuite/batched/kept_steps.py): a recorded step is kept there and serves the
    later rounds of its kind of group, which are then not recorded again.
    Each result's `seconds` is the group's time divided by C."""
    settings = LocalSettings.given(settings, keywords)
    start = time.perf_counter()
    stacked = stack_rules(rules)
    draws = _steps(datas, rules, settings.epochs, settings.steps, settings.batch_size, generators)
    first = None if kept is None or privates is not None else next(draws, None)  # its shapes: part of a kept kind
    draws = draws if first is None else itertools.chain([first], draws)
    graphs = (cuda_graphs, on_not_recorded, kept)
    with ledgers_kept_on_failure(privates):
        group, key = _group(model, x0s, first, loss_fn, rules, stacked.rule, settings, generators, privates, graphs)
        k, first_loss = _round(group, draws, kept, key)
        if group.recorded is not None and group.recorded.failed and on_graph_failure is not None:
            on_graph_failure(group.recorded.failed)
        x = group.model.x
        if key is not None:  # a kept step's tensors serve the next round: the round's own take their values
            if group.rule is not stacked.rule:
                refill(stacked.rule, group.rule)
            x = x.clone()
        stacked.write_back()
    return _results(x0s, x, k, group.loss_sum, first_loss, start)


def _round(group: KeptStep, draws, kept: KeptSteps | None, key) -> tuple[int, Any]:
    """`_run` of the group's step; a kept step (`key`) whose round raised is dropped: it serves no later round."""
    try:
        new_step = getattr(group.oracle, "new_step", None)  # DP-SGD's ledgers' step
        loaders = [owner.load_blocks for owner in stage_owners(group.rule) if hasattr(owner, "load_blocks")]
        return _run(group.step, group.recorded, group.ctx, draws, group.loss_sum, new_step, loaders)
    except Exception:
        if key is not None:
            kept.drop(key)
        raise


def _group(model, x0s, first, loss_fn, rules, rule, settings, generators, privates, graphs):
    """(the group's step on its tensors, its key in the run's kept steps or None): the kept step of this kind of
    group with this round's values written into it (fedsuite/batched/kept_steps.py), or a new one, kept for the run
    when it was recorded. `first`: the round's first stacked minibatch (None: nothing is kept)."""
    cuda_graphs, on_not_recorded, kept = graphs
    key = None
    if first is not None:
        key = group_key(rules, settings, first[0], first[1], model.module, loss_fn)
        held = kept.get(key)
        if held is not None:
            refill(held.rule, rule)
            torch.stack(list(x0s), out=held.x0)
            held.model.x.copy_(held.x0)
            held.loss_sum.zero_()
            return held, key
    model_c = StackedModel(model, len(rules))
    x0 = torch.stack(list(x0s))
    ctx = StepContext(x=model_c.x.copy_(x0), x0=x0, lr=settings.lr)
    oracle = _oracle(model_c, rules, generators, privates)

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = rule.point(oracle, loss_fn, inputs, targets)
        move(model_c.grad, ctx, rule, batch=targets.shape[1], settings=settings)
        return loss

    recorded = _recorded(step, rule, model_c.x.device, settings.steps, rules[0].batches, cuda_graphs,
                         on_not_recorded, privates)  # fmt: skip
    group = KeptStep(model_c, x0, ctx, rule, torch.zeros(len(rules), device=x0.device), step, recorded, oracle)
    if key is None or recorded is None:
        return group, None
    kept.keep(key, group)
    return group, key


def _oracle(model_c: StackedModel, rules, generators, privates) -> StackedModel | StackedPrivateModel:
    """The model the group's point stage takes its gradients from: the stacked model, or with `privates` the
    private one, each client's noise stream started from its own rule and generator as one client's loop does."""
    if privates is None:
        return model_c
    for private, rule, generator in zip(privates, rules, generators, strict=True):
        private.start(rule, generator, model_c.x.device)
    return StackedPrivateModel(model_c, privates)


def _run(step, recorded, ctx: StepContext, draws, loss_sum: torch.Tensor, new_step=None,
         loaders=()) -> tuple[int, Any]:  # fmt: skip
    """Every step of the round, by `step` or by its recorded graph: each client's losses summed into `loss_sum`
    (in place); returns the number of steps and the first step's losses (None: no step). `new_step()`, when given,
    is called before each step (the DP-SGD ledgers' step), and each of `loaders` with the step's fixed blocks (the
    stacked block table's, which a recording reads from the device)."""
    first_loss = None
    k = 0
    for inputs, targets, blocks in draws:
        ctx.step, ctx.block = k, None if all(b is None for b in blocks) else blocks
        if new_step is not None:
            new_step()
        if ctx.block is not None:
            for load in loaders:
                load(ctx.block)
        loss = step(inputs, targets) if recorded is None else recorded.run(k, inputs, targets)
        loss_sum += loss
        if first_loss is None:
            first_loss = loss.detach().clone()
        k += 1
    return k, first_loss


def _recorded(step, rule: UpdateRule, device: torch.device, steps: int, batches, cuda_graphs: bool, on_not_recorded,
              privates=None):  # fmt: skip
    """The step recorded as a CUDA graph (fedsuite/batched/graph.py) when asked for on a CUDA device and the rule
    allows it, else None; `on_not_recorded(reason)` hears why a CUDA group runs step by step. A DP-SGD step
    (`privates`) is not recorded: it draws from each client's own noise generator and counts its ledgers on the
    host."""
    if device.type != "cuda" and cuda_graphs and kept_steps.ON_CPU:  # tests: a kept step's path on the CPU
        if privates is None and not_replayable(rule, torch.device("cuda"), steps, batches) is None:
            return kept_steps.StepOnCpu(step)
        return None
    if not cuda_graphs or device.type != "cuda":
        return None
    if privates is not None:
        why = "dp-sgd draws each client's noise from its own generator and counts its steps on the host"
    else:
        why = not_replayable(rule, device, steps, batches) if steps else "epoch mode (local-steps=0)"
    if why is None:
        return RecordedStep(step, device)
    if on_not_recorded is not None:
        on_not_recorded(why)
    return None


def _results(x0s, x: torch.Tensor, k: int, loss_sum: torch.Tensor, first_loss, start: float) -> list[LocalResult]:
    """One LocalResult per client from the stacked iterate, the per-client loss sums and first losses; each
    client's seconds is the group's time since `start` divided by the number of clients."""
    clients = len(x0s)
    sums = loss_sum.tolist()
    firsts = [None] * clients if first_loss is None else first_loss.tolist()
    seconds = (time.perf_counter() - start) / clients
    return [
        LocalResult(x0=x0s[c], x=x[c], steps=k, mean_loss=sums[c] / max(k, 1), seconds=seconds, first_loss=firsts[c])
        for c in range(clients)
    ]


def _steps(datas, rules, epochs: int, steps: int, batch_size: int, generators):
    """Each step's stacked minibatches (C, B, …), targets (C, B) and the clients' fixed blocks (None each for the
    default source): the whole round drawn at once where it can be (fedsuite/batched/draws.py), else step by step
    from each client's batch source."""
    if drawable(datas, rules, steps, batch_size):
        rounds = [drawn_round(data, steps, batch_size, g) for data, g in zip(datas, generators, strict=True)]
        inputs = torch.stack([r[0] for r in rounds], dim=1)  # (K, C, B, …): each step's slice is contiguous
        targets = torch.stack([r[1] for r in rounds], dim=1)
        blocks = [None] * len(rounds)
        for k in range(steps):
            yield inputs[k], targets[k], blocks
        return
    sources = [
        (r.batches or plain_batches)(data, epochs, steps, batch_size, generator)
        for r, data, generator in zip(rules, datas, generators, strict=True)
    ]
    for draws in zip(*sources, strict=True):
        yield (torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws]), [d[2] for d in draws])
