"""The minibatches a client's local loop trains on, replayed from the loop's own batch source and generator, for a
float64 reference written beside a run (docs/own/algorithm.md, "A float64 reference")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsuite.config.run_config import resolve
from fedsuite.testing.federations import LSQ


@dataclass(frozen=True)
class Minibatch:
    """What one local step trained on: a float64 reference takes `rows` of the client's data, or `inputs` and
    `targets` themselves (the same rows, augmented as the loop saw them where the dataset crops and flips)."""

    step: int  # k, the local step that trained on it, from 0
    rows: np.ndarray  # its samples' positions in the client's training rows, in the order the loop took them
    inputs: np.ndarray  # float64
    targets: np.ndarray  # float64 for regression, the integer labels for classification
    block: int | None = None  # the fixed data block j of the step (block sources: local-batches='blocks'), else None


def minibatch_order(partition: int, server_round: int, run_config: Mapping[str, Any] | None = None, *,
                    steps: int | None = None, source: Callable | None = None) -> list[Minibatch]:  # fmt: skip
    """The minibatches client `partition`'s local loop trains on in round `server_round` of `run_config` (over LSQ's
    keys), one per local step, in order: drawn by the loop's batch source (fedsuite.local.loop.plain_batches, or the
    client's fixed blocks under local-batches='blocks') from the generator the client trains with, a function of
    (seed, round, partition) only (fedsuite.node.holdings.ClientNode.generator). The client's training rows are its
    partition
    (`least_squares(run_config).clients[partition]`) unless validation-fraction or a local test share holds some out.

    `steps`: K_i where the server's system model sets it per client (local-work, round-deadline: the reply's
    `steps`); default the run config's local-steps (0: epoch mode). `source`: the client rule's own
    `UpdateRule.batches`, for a client that sets one; it is called twice, for the batches and for their rows."""
    from fedsuite.data import with_data_clients
    from fedsuite.node.holdings import ClientNode

    cfg = with_data_clients(resolve({**LSQ, **(run_config or {})}))
    if not 0 <= partition < cfg.num_clients:
        raise ValueError(f"partition={partition}: the run has clients 0..{cfg.num_clients - 1} (num-clients)")
    if server_round < 1:
        raise ValueError(f"server_round={server_round}: clients train in rounds 1, 2, …")
    node, local = ClientNode(cfg, partition, cfg.num_clients), cfg.local
    data = node.data
    source = source or _loop_source(cfg, len(data), partition)
    shape = (local.epochs, local.steps if steps is None else steps, local.batch_size)
    positions = _positions(len(data), data.crop_pad)
    drawn = source(data, *shape, node.generator(server_round))
    replayed = source(positions, *shape, node.generator(server_round))  # the same draws, on the rows' positions
    steps_drawn = enumerate(zip(drawn, replayed, strict=True))
    return [Minibatch(k, _host(rows).astype(np.int64), _host(inputs).astype(np.float64), _targets(targets), block)
            for k, ((inputs, targets, block), (_, rows, _)) in steps_drawn]  # fmt: skip


def _loop_source(cfg, num_samples: int, partition: int) -> Callable:
    """The batch source the client's loop draws from when its rule sets none (RuleClient.prepare): the client's
    fixed blocks under local-batches='blocks', else fedsuite.local.loop.plain_batches."""
    from fedsuite.local.loop import plain_batches
    from fedsuite.local.variance import FixedBlocks

    if cfg.local.local_batches == "blocks":
        return FixedBlocks(num_samples, cfg.local.blocks, cfg.seed, partition)  # as ClientRule.blocks builds them
    return plain_batches


def _positions(n: int, crop_pad: int):
    """LocalData whose targets are the row positions 0..n−1 (its inputs are placeholders a crop-and-flip can act
    on: drawn from a generator, the batches' targets are then the rows the loop takes)."""
    import torch

    from fedsuite.local.loop import LocalData

    return LocalData(torch.zeros((n, 1, 1, 1)), torch.arange(n), crop_pad)


def _host(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _targets(tensor) -> np.ndarray:
    values = _host(tensor)
    return values.astype(np.float64) if np.issubdtype(values.dtype, np.floating) else values
