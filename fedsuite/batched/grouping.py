"""Which prepared clients of a round can train as one stacked computation: the same K_i, the same minibatch size at
every step (the same batch plan), rules that stack (fedsuite/batched/stacking.py) and, with dp-sgd, the same DP-SGD
settings. `group_key` says it for one client, or raises NotBatchable with the reason in a few words."""

from __future__ import annotations

import math

from fedsuite.batched.stacking import NotStackable, rule_signature
from fedsuite.local.loop import LocalData
from fedsuite.local.variance import FixedBlocks


class NotBatchable(ValueError):
    """This client trains alone; the message says why."""


def batch_plan(data: LocalData, batches, epochs: int, steps: int, batch_size: int) -> tuple:
    """K_i and the minibatch size of every step, as a short key (fedsuite.local.loop.minibatches, FixedBlocks)."""
    n = len(data)
    if batches is None:
        b = n if batch_size <= 0 else min(batch_size, n)
        if steps > 0:
            return ("draws", steps, b, data.crop_pad)
        per_epoch = math.ceil(n / b)
        return ("epochs", epochs, per_epoch, b, n - (per_epoch - 1) * b, data.crop_pad)
    if isinstance(batches, FixedBlocks):
        sizes = {len(block) for block in batches.blocks}
        if len(sizes) > 1:
            raise NotBatchable("its fixed data blocks differ in size (losac-blocks does not divide its samples)")
        k = steps if steps > 0 else epochs * len(batches)
        return ("blocks", k, sizes.pop(), data.crop_pad)
    raise NotBatchable(f"its batch source {type(batches).__name__} is not one the stacked loop knows")


def group_key(client, fit) -> tuple:
    """The key clients of one group share: (lr, batch plan, rule signature, DP-SGD settings) of a prepared fit
    (fedsuite.node.client.PreparedFit) of `client` (a RuleClient). With dp-sgd the clients of a group share σ_s, C_s
    and B (fedsuite/batched/private.py); each keeps its own noise stream and ledger."""
    node, local = client.node, client.node.cfg.local
    try:
        signature = rule_signature(fit.rule)
    except NotStackable as err:
        raise NotBatchable(str(err)) from None
    plan = batch_plan(node.data, fit.rule.batches, local.epochs, fit.steps, local.batch_size)
    private = fit.private
    dp_sgd = () if private is None else ("dp-sgd", private.noise, private.clip, private.batch, private.per_record)
    return (fit.ctx.lr, plan, signature, dp_sgd)


def plan_shape(plan: tuple) -> tuple[int, int]:
    """(K_i, the largest minibatch's size) of a `batch_plan` key: what the memory plan (fedsuite/batched/chunks.py)
    counts a client's drawn round and one step's activations by."""
    kind = plan[0]
    if kind == "draws":
        return plan[1], plan[2]
    if kind == "epochs":
        return plan[1] * plan[2], plan[3]
    return plan[1], plan[2]  # blocks
