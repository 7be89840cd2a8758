"""FedMIM's local consistency (1/S) Σ_i ‖Δ_i − mean_S Δ_j‖² of a round's displacements, without a S × d matrix.

The figure is written in every round's row, so it must come out as it always has, bit for bit: as
`np.mean(np.sum((D - D.mean(axis=0)) ** 2, axis=1))` over the stacked displacements D. That expression makes three
S × d float64 temporaries (about 2.7 GB per round for 10 clients of an 11 M-parameter model) and took seconds per
round. Here the same sums are formed a cache-sized block of coordinates at a time:

- the mean over clients is elementwise (each coordinate summed over the clients in order, then divided by S), so
  any split of the coordinates gives the same values;
- NumPy sums a row by pairwise summation: a run of more than 128 values is split at half its length rounded down to
  a multiple of 8 and the two halves' sums added. The blocks here are exactly the nodes of that tree of at most
  `LEAF` values; each block is summed by `np.sum` (the same pairwise summation below that node) and the block sums
  are added back up the same tree, so every row sum is the one `np.sum` of the whole row gives.
The blocks are independent, so runs of them are filled on the block threads (fedsuite/server/blockwise.py) and the sums
added up afterwards, in the tree's order. tests/test_speed_paths.py checks the equality against the stacked
expression. Replies kept on the device get the figure there (`local_consistency_on_device`), to float64 rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedsuite.server import blockwise

LEAF = 1 << 17  # coordinates per block: 1 MiB of float64, long enough that a thread spends its time in NumPy's loops,
# with the GIL let go, rather than in the calls around them


def _blocks(start: int, n: int, out: list[tuple[int, int]]) -> None:
    """The nodes of NumPy's pairwise-summation tree over [start, start + n) that hold at most LEAF values, in order."""
    if n <= LEAF:
        out.append((start, n))
        return
    half = n // 2
    half -= half % 8
    _blocks(start, half, out)
    _blocks(start + half, n - half, out)


def _tree_sum(sums: list[float], n: int, position: list[int]) -> float:
    """The block sums of a run of n values added up the tree `_blocks` walked (position: the next block's index)."""
    if n <= LEAF:
        position[0] += 1
        return sums[position[0] - 1]
    half = n // 2
    half -= half % 8
    left = _tree_sum(sums, half, position)
    return left + _tree_sum(sums, n - half, position)


def local_consistency(deltas: Sequence[np.ndarray]) -> float:
    """(1/S) Σ_i ‖Δ_i − mean_S Δ_j‖² of float64 vectors of one length, equal to the stacked expression above."""
    count, dim = len(deltas), int(deltas[0].size)
    blocks: list[tuple[int, int]] = []
    _blocks(0, dim, blocks)
    block_sums = np.empty((count, len(blocks)))

    def fill(group: range) -> None:  # a run of blocks j: their column block_sums[:, j]
        mean, deviation = np.empty(min(dim, LEAF)), np.empty(min(dim, LEAF))
        for j in group:
            start, n = blocks[j]
            m, t = mean[:n], deviation[:n]
            np.copyto(m, deltas[0][start : start + n])
            for delta in deltas[1:]:
                m += delta[start : start + n]
            m /= count
            for i, delta in enumerate(deltas):
                np.subtract(delta[start : start + n], m, out=t)
                np.square(t, out=t)
                block_sums[i, j] = np.add.reduce(t)  # np.sum(t), without its Python wrapper

    blockwise.each(blockwise.tasks(len(blocks)), fill)
    rows = np.array([_tree_sum(block_sums[i].tolist(), dim, [0]) for i in range(count)])
    return float(np.mean(rows))


def local_consistency_on_device(deltas: Sequence[torch.Tensor]) -> float:
    """The same figure from float32 tensors on a device (replies kept there, fedsuite/codec/device_arrays.py), in
    float64 on that device, one d-vector at a time (no S × d matrix). The mean is the host's, elementwise in the same
    order; each squared norm is summed by torch's reduction, whose order differs from NumPy's pairwise tree, so the
    figure equals the host one to float64 rounding (about 1e-15 relative), not bit for bit."""
    count = len(deltas)
    mean = torch.zeros(deltas[0].shape, dtype=torch.float64, device=deltas[0].device)
    for delta in deltas:
        mean.add_(delta.to(torch.float64))
    mean.div_(torch.full_like(mean, count))
    norms = torch.stack([torch.sum(torch.square(delta.to(torch.float64) - mean)) for delta in deltas])
    return float(np.mean(norms.cpu().numpy()))
