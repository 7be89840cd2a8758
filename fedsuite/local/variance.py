"""Stages of the shared local loop for the LoSAC family (docs/algorithms/losac.md): fixed data blocks, the per-block
gradient table, and proximal operators.

- `FixedBlocks`: a client's data split once into M equal blocks (a permutation fixed by (run seed, partition));
  each local step trains on one whole block j (a `batches` source of `fedsuite.local.loop`).
- `BlockTable`: the SAGA-type correction of one step on block j (eqs. 9–11, scale-consistent form):
      d = G_j(x) + e/scale − y_j,    e ← e + (G_j(x) − y_j)/M,    y_j ← G_j(x)
  with e = ϕ_i (a copy of the server's ϕ, scale N: LoSAC) or e = φ̃_i = mean_j y_j (scale 1: FedSaga).
- `SoftThreshold` (Ψ = λ‖x‖₁) and `NuclearShrink` (Ψ = λ‖X‖_* per matrix parameter): x ← prox_{ηΨ}(x), applied
  after each step's move (eq. 16).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from fedsuite.local.loop import LocalData, StepContext, _batch

DELTA_PHI = "delta_phi"  # LoSAC's uplink array Δϕ_i, the change of the client's table mean (eq. 12)


class FixedBlocks:
    """M fixed blocks of a client's local data (the last ones one sample shorter when M does not divide n_i).

    A step trains on one block: K = `steps` blocks drawn uniformly with replacement, or (epoch mode, steps = 0)
    every block once per epoch in a random order. The permutation depends only on (seed, partition)."""

    def __init__(self, num_samples: int, num_blocks: int, seed: int, partition_id: int):
        if num_blocks > num_samples:
            raise ValueError(
                f"losac-blocks={num_blocks}: client {partition_id} has only {num_samples} samples; use at most that"
            )
        state = np.random.SeedSequence([seed, partition_id, 0xB10C]).generate_state(1)[0]
        perm = torch.randperm(num_samples, generator=torch.Generator().manual_seed(int(state)))
        self.blocks: list[torch.Tensor] = list(torch.tensor_split(perm, num_blocks))

    def __len__(self) -> int:
        return len(self.blocks)

    def __call__(
        self, data: LocalData, epochs: int, steps: int, batch_size: int, generator: torch.Generator
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, int]]:
        m = len(self.blocks)
        if steps > 0:
            order = torch.randint(0, m, (steps,), generator=generator).tolist()
        else:
            order = [j for _ in range(epochs) for j in torch.randperm(m, generator=generator).tolist()]
        device = data.inputs.device
        for j in order:
            inputs, targets = _batch(data, self.blocks[j].to(device), generator)
            yield inputs, targets, j


class BlockTable:
    """The block-gradient table correction (module docstring); `table` and `estimate` are updated in place.

    `table` holds y_{i,1..M} (client state); `estimate` is e; `scale` is N for LoSAC's ϕ_i, 1 for FedSaga's φ̃_i.
    The step's d must be the plain block gradient G_j(x) (no weight decay: the LoSAC suite uses none)."""

    def __init__(self, table: Sequence[torch.Tensor], estimate: torch.Tensor, scale: float):
        self.table, self.estimate, self.scale = table, estimate, scale
        self.change = torch.zeros_like(estimate)  # Σ of this round's (G_j − y_j)/M: e's change, summed on its own
        self._diff: torch.Tensor | None = None

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> None:
        if ctx.block is None:
            raise ValueError("BlockTable needs a block source (FixedBlocks) as the rule's batches")
        y = self.table[ctx.block]
        if self._diff is None:
            self._diff = torch.empty_like(d)
        diff = torch.sub(d, y, out=self._diff)  # G_j(x) − y_j
        y.copy_(d)
        d.copy_(diff).add_(self.estimate, alpha=1.0 / self.scale)
        self.estimate.add_(diff, alpha=1.0 / len(self.table))
        self.change.add_(diff, alpha=1.0 / len(self.table))


class SoftThreshold:
    """prox_{ηλ‖·‖₁}(x) = sign(x)·max(|x| − ηλ, 0), elementwise over every parameter."""

    def __init__(self, lam: float):
        self.lam = lam

    def __call__(self, x: torch.Tensor, lr: float, ctx: StepContext) -> None:
        t = lr * self.lam
        x.copy_(torch.sign(x) * torch.clamp(x.abs() - t, min=0.0))


class NuclearShrink:
    """prox_{ηλ‖·‖_*}(X) = U diag(max(σ − ηλ, 0)) Vᵀ for every matrix parameter (2-D or more, as rows × rest);
    vectors (biases) are left alone. `shapes` are the module's parameter shapes in flat order."""

    def __init__(self, lam: float, shapes: Sequence[torch.Size]):
        self.lam = lam
        self.slices: list[tuple[int, int, int]] = []  # (offset, rows, cols)
        offset = 0
        for shape in shapes:
            n = int(np.prod(shape)) if len(shape) else 1
            if len(shape) >= 2:
                self.slices.append((offset, int(shape[0]), n // int(shape[0])))
            offset += n
        if not self.slices:
            raise ValueError("prox-penalty='nuclear' needs a model with a matrix-shaped parameter")

    def __call__(self, x: torch.Tensor, lr: float, ctx: StepContext) -> None:
        t = lr * self.lam
        for offset, rows, cols in self.slices:
            block = x[offset : offset + rows * cols].view(rows, cols)
            u, s, vh = torch.linalg.svd(block, full_matrices=False)
            block.copy_((u * torch.clamp(s - t, min=0.0)) @ vh)


def proximal_stage(cfg, module: torch.nn.Module):
    """The run config's Ψ (`prox-penalty`, `prox-lambda`) as a proximal stage for `module`'s flat parameters."""
    penalty, lam = cfg["prox-penalty"], cfg["prox-lambda"]
    if penalty == "l1":
        return SoftThreshold(lam)
    if penalty == "nuclear":
        return NuclearShrink(lam, [p.shape for p in module.parameters()])
    raise ValueError(f"prox-penalty={penalty!r}: allowed values are l1, nuclear")


def numerical_rank(matrix: np.ndarray, tol: float = 1e-3) -> int:
    """Number of singular values above `tol` (the low-rank study's rank, docs/lowrank/index.md)."""
    return int((np.linalg.svd(np.asarray(matrix, np.float64), compute_uv=False) > tol).sum())
