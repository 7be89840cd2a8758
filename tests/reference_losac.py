"""Independent float64 numpy implementations of the LoSAC family (docs/algorithms/losac.md) on a least-squares
federation, written from the algorithm pages alone. Shared with fedsuite only: the data, the cohort sampler, and the
data order (each client's fixed blocks and the block drawn at each step), which the reference replays.

F_i(x) = (1/2n)‖A_i x − b_i‖²; block j's gradient is the mean (or sum) over its rows; no weight decay.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsuite.local.variance import FixedBlocks
from tests.reference import Federation


class BlockFederation(Federation):
    def __init__(self, run_config: dict):
        super().__init__(run_config)
        self.m = int(self.cfg["losac-blocks"])
        seed = int(self.cfg["seed"])
        self.blocks = [[b.numpy() for b in FixedBlocks(len(bi), self.m, seed, i).blocks]
                       for i, (_, bi) in enumerate(self.clients)]  # fmt: skip
        self.summed = self.cfg["loss-reduction"] == "sum"

    def draws(self, i: int, server_round: int) -> list[int]:
        """The blocks client i trains on in `server_round` (fedsuite.node.holdings's generator recipe, FixedBlocks'
        draw)."""
        seed = np.random.SeedSequence([int(self.cfg["seed"]), server_round, i]).generate_state(1)[0]
        return torch.randint(0, self.m, (self.k,), generator=torch.Generator().manual_seed(int(seed))).tolist()

    def block_grad(self, i: int, j: int, x: np.ndarray) -> np.ndarray:
        a, b = self.clients[i]
        rows = self.blocks[i][j]
        g = a[rows].T @ (a[rows] @ x - b[rows]) / len(rows)
        return g * len(rows) if self.summed else g


def soft_threshold(x, t):
    return np.sign(x) * np.maximum(np.abs(x) - t, 0.0)


def losac(f: BlockFederation, phi_scale: str = "1", local_table: bool = False, prox=None) -> np.ndarray:
    """LoSAC (eqs. 10–13, scale-consistent form); local_table=True is FedSaga (eq. 9); prox(x, lr) after each
    move is LoSAC-Prox (eq. 16)."""
    x, phi = f.x0.copy(), np.zeros_like(f.x0)
    y = [[np.zeros_like(f.x0) for _ in range(f.m)] for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, deltas, dphis = f.lr(t), f.sampler.cohort(t + 1), [], []
        for i in cohort:
            xi = x.copy()
            est = np.mean(y[i], axis=0) if local_table else phi.copy()
            start = est.copy()
            for j in f.draws(i, t + 1):
                g = f.block_grad(i, j, xi)
                xi = xi - lr * (g + (est if local_table else est / f.n) - y[i][j])
                est = est + (g - y[i][j]) / f.m
                y[i][j] = g
                if prox is not None:
                    xi = prox(xi, lr)
            deltas.append(xi - x)
            dphis.append(est - start)
        x = x + np.mean(deltas, axis=0)
        if not local_table:
            phi = phi + (f.n / len(cohort) if phi_scale == "N/S" else 1.0) * np.sum(dphis, axis=0)
    return x


def scaffold_blocks(f: BlockFederation, prox=None) -> np.ndarray:
    """SCAFFOLD option II (docs/algorithms/scaffold.md) on the same block draws; prox(x, lr) after each move is
    SCAFFOLD-Prox."""
    x, c, ci = f.x0.copy(), np.zeros_like(f.x0), [np.zeros_like(f.x0) for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, deltas, dcs = f.lr(t), f.sampler.cohort(t + 1), [], []
        for i in cohort:
            xi = x.copy()
            for j in f.draws(i, t + 1):
                xi = xi - lr * (f.block_grad(i, j, xi) - ci[i] + c)
                if prox is not None:
                    xi = prox(xi, lr)
            new = ci[i] - c + (x - xi) / (f.k * lr)
            deltas.append(xi - x)
            dcs.append(new - ci[i])
            ci[i] = new
        x = x + np.mean(deltas, axis=0)
        c = c + np.sum(dcs, axis=0) / f.n
    return x
