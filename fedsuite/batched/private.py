"""DP-SGD inside the stacked step (dp-sgd=true with batch-clients=true, docs/privacy-dp-sgd.md).

`StackedPrivateModel` is what a stacked group's point stage sees in place of the `StackedModel` when its clients
train with DP-SGD, as one client's loop gives its oracle a `fedsuite.privacy.dp_sgd.PrivateModel`. Its
`loss_and_grad` takes, for each client c at its own row of the (C, d) iterate, the gradient of each record of c's
minibatch (torch.func: a `vmap` over clients of a `vmap` over records of `grad` of `functional_call`), clips each to
C_s, sums them per client, adds N(0, σ_s²C_s²·I) drawn from client c's own noise stream (the numbers, generator and
order of one client's `DpSgd.release`), divides by B and writes row c of `grad`. Every gradient a point stage takes
is such a private one (SAM's two, a look-ahead point's), and each client's `DpSgd` counts its releases per step as
one client's loop does, so its steps, ε, budget refusal and metrics are what they are one at a time.

With dp-sgd-per-record='ghost' the clipped sums come from ghost clipping over the whole group instead
(fedsuite/batched/ghost.py): the records' gradient norms without the gradients, then one more backward pass with
each record's loss scaled by its clip factor; the same sums to float rounding, and no C·B·d floats.

Memory ('vmap'): the per-record gradients of a step are C·B·d floats. When that passes `piece_bytes` the records of
a step are taken in pieces of fewer records each (every client's records k..k+b of the batch at once), their
clipped sums added up; the result is the same up to float rounding.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch.func import functional_call, grad, vmap

from fedsuite.batched.ghost import StackedGhost
from fedsuite.batched.model import StackedModel
from fedsuite.local.loop import UpdateRule
from fedsuite.models.networks import loss_inputs

RECORD_GRADIENT_BYTES = 4 << 30  # per-record gradients of one piece of a step's records: at most this many bytes


class StackedPrivateModel:
    """The StackedModel a DP-SGD group's oracle sees (module docstring): `loss_and_grad` writes each client's private
    gradient into its row of `grad`; everything else (x, grad, module …) is the stacked model's own."""

    def __init__(self, model: StackedModel, privates: Sequence[Any], piece_bytes: int = RECORD_GRADIENT_BYTES):
        """`privates`: each client's `fedsuite.privacy.dp_sgd.DpSgd`, in row order, already started (`start`)."""
        if len({(p.noise, p.clip, p.batch, p.per_record) for p in privates}) > 1:
            raise ValueError("dp-sgd=true: the clients of a stacked group differ in noise, clip, batch size or "
                             "dp-sgd-per-record")  # fmt: skip
        if len(privates) != model.x.shape[0]:
            raise ValueError(f"{len(privates)} DP-SGD oracles for {model.x.shape[0]} stacked clients")
        self._model, self.privates, self.piece_bytes = model, list(privates), piece_bytes
        self._gradients: dict[Any, Any] = {}  # loss_fn → its per-record gradient function
        self._ghosts: dict[Any, StackedGhost] = {}  # loss_fn → its ghost clipping (dp-sgd-per-record='ghost')
        self._noise: torch.Tensor | None = None  # (C, d) in the default dtype, as DpSgd.release draws its noise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def new_step(self) -> None:
        """A new step for every client's ledger."""
        for private in self.privates:
            private.new_step()

    def loss_and_grad(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each client's private gradient at its row of `x` (module docstring) into `grad`; returns each client's
        mean record loss on its minibatch, (C,)."""
        first = self.privates[0]
        first.check_batch(targets.shape[1])
        if first.per_record == "ghost":
            if loss_fn not in self._ghosts:
                self._ghosts[loss_fn] = StackedGhost(self._model, loss_fn)
            losses = self._ghosts[loss_fn].clipped_sums(inputs, targets, first.clip)
        else:
            losses = self._clipped_sums(loss_fn, inputs, targets).mean(dim=1)
        total = self._model.grad
        if first.noise > 0:
            total.add_(self._noise_draws(), alpha=first.noise * first.clip)
        total.div_(first.batch)
        for private in self.privates:
            private.releases[-1] += 1
        return losses

    def records_per_piece(self) -> int:
        """How many of each client's records one piece of a step takes: all B unless the per-record gradients of a
        piece (C·b·d floats) pass `piece_bytes`; ghost clipping holds none and takes all B."""
        clients, dim = self._model.x.shape
        if self.privates[0].per_record == "ghost":
            return self.privates[0].batch
        per_record = clients * dim * self._model.x.element_size()
        return max(1, min(self.privates[0].batch, self.piece_bytes // per_record))

    def _clipped_sums(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Σ over each client's records of clip(record gradient) into `grad` (C, d), piece by piece; the records'
        losses (C, B), detached."""
        model, clip = self._model, self.privates[0].clip
        gradient = self._gradient(loss_fn)
        piece, records = self.records_per_piece(), targets.shape[1]
        losses = []
        enabled = model.autocast == "bf16"
        for start in range(0, records, piece):
            part = slice(start, start + piece)
            with torch.autocast(model.x.device.type, dtype=torch.bfloat16, enabled=enabled):
                grads, part_losses = gradient(model.parameters, inputs[:, part], targets[:, part])
            _add_clipped(model, grads, clip, first=start == 0)
            losses.append(part_losses)
        return losses[0] if len(losses) == 1 else torch.cat(losses, dim=1)

    def _gradient(self, loss_fn):
        """Per-client, per-record (loss, gradient) at each client's row: dicts of (C, b, *shape) and (C, b)."""
        if loss_fn not in self._gradients:
            module = self._model.module

            def record_loss(params, record, target):
                out = functional_call(module, params, (record.unsqueeze(0),))
                loss = loss_fn(*loss_inputs(out, target.unsqueeze(0)))
                return loss, loss.detach()

            per_record = vmap(grad(record_loss, has_aux=True), in_dims=(None, 0, 0))
            self._gradients[loss_fn] = vmap(per_record, in_dims=(0, 0, 0))
        return self._gradients[loss_fn]

    def _noise_draws(self) -> torch.Tensor:
        """(C, d) standard normal draws, row c from client c's own noise stream (one `DpSgd.draw_noise` each)."""
        if self._noise is None:
            self._noise = torch.empty(self._model.x.shape, device=self._model.x.device)  # the default dtype
        for row, private in enumerate(self.privates):
            private.draw_noise(self._noise[row])
        return self._noise


def _add_clipped(model: StackedModel, grads: dict[str, torch.Tensor], clip: float, *, first: bool) -> None:
    """Each record's gradient (`grads`: name → (C, b, *shape)) scaled to L2 norm ≤ clip over all its parameters (a
    record inside the ball keeps factor 1, as `fedsuite.privacy.dp_sgd.clip_records`), summed over the records into
    each client's row of `model.grad` (written when `first`, else added)."""
    clients, records = next(iter(grads.values())).shape[:2]
    flats = [grads[name].reshape(clients, records, -1) for name, _ in model.layout]
    norms = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(flat, dim=2) for flat in flats]), dim=0)
    factor = torch.clamp(clip / (norms + 1e-12), max=1.0).unsqueeze(1)  # (C, 1, b)
    offset = 0
    for flat in flats:
        size = flat.shape[2]
        summed = torch.bmm(factor, flat).squeeze(1)  # (C, size)
        row_part = model.grad[:, offset : offset + size]
        if first:
            row_part.copy_(summed)
        else:
            row_part.add_(summed)
        offset += size


def probe_oracle(model: StackedModel, private: Any) -> StackedPrivateModel:
    """A private oracle over `model` for a memory probe (fedsuite/batched/chunks.py): one throwaway copy of a
    client's `DpSgd` per row (its noise, clip and batch size; an empty ledger; a noise stream of its own), so the
    probe's step costs what a private step costs and touches no client's ledger or noise stream."""
    copies = []
    for row in range(model.x.shape[0]):
        copy = replace(private, releases=[], _noise_stream=None, _epsilons={})
        copy.start(UpdateRule(), torch.Generator().manual_seed(row), model.x.device)
        copy.new_step()
        copies.append(copy)
    return StackedPrivateModel(model, copies)


@contextmanager
def ledgers_kept_on_failure(privates: Sequence[Any] | None) -> Iterator[None]:
    """On an exception, each client's ledger drops the steps the failed stacked attempt counted (it released
    nothing; the client then trains alone and counts its own steps)."""
    if not privates:
        yield
        return
    kept = [len(private.releases) for private in privates]
    try:
        yield
    except BaseException:
        for private, steps in zip(privates, kept, strict=True):
            del private.releases[steps:]
        raise
