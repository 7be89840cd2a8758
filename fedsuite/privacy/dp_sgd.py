"""Sample-level differential privacy (DP-SGD) inside the one local loop (docs/privacy-dp-sgd.md).

With dp-sgd=true every gradient a local step's oracle takes (fedsuite/local/loop.py: `AtIterate`, `SharpnessAware`,
`LookAhead`, a plug-in's own) is a private one: the gradient of each record of the batch at the oracle's point
(torch.func: `vmap` of `grad` over `functional_call` of the model's module), each clipped to norm C_s, summed (or
that clipped sum by ghost clipping with dp-sgd-per-record='ghost', fedsuite/privacy/per_record.py),
plus Gaussian noise N(0, σ_s²C_s²) on every coordinate, divided by the batch size B. The oracle sees a
`PrivateModel` whose `loss_and_grad` does this, so the rule's correction terms (`clipped`, `unclipped`,
`after_step` …) are added to the private gradient exactly as they are added to the plain one, and an oracle that
takes two gradients of a batch (SAM: FedSAM, MoFedSAM, FedSpeed, FedSpeed-Ing) releases two private gradients.

Accounting (fedsuite/privacy/accountant.py, Google's dp-accounting library): a step is one event, a batch of B of
the client's n records drawn without replacement, in which the k gradients the oracle released on that batch are k
Gaussian mechanisms of noise multiplier σ_s on sums of per-record gradients clipped to C_s (replace-one
neighbours). The library composes them as `SelfComposedDpEvent(GaussianDpEvent, k)` inside the
`SampledWithoutReplacementDpEvent`, which its Rényi accountant reduces to one Gaussian of multiplier σ_s/√k; the
client's ledger hands the run accountant that multiplier (tests/test_dp_sgd.py checks it against the library's
composed event). A client's ledger is its rounds: the rounds r ≤ t whose cohort drew it (fedsuite.server.sampling, a
pure function of the run seed, as the server draws them), each K steps of this round's kind, so it needs no client state
and survives rebuilt client objects and resumed runs; a drawn client whose reply was lost still counts (an upper bound).

The noise has a random stream of its own (fedsuite/privacy/noise.py), so the minibatches are those of the plain run
with the same seed: keyed by secret bits from the OS by default, or with dp-noise-source='seeded' seeded from the
round's generator (the same seed gives the same numbers, and the run is not private).

A target ε (dp-target-epsilon) is the client's own guard: a round that would take its ε past the target releases
nothing (PrivacyBudgetSpent, which ends the run with status budget-spent), and every reply says what one more
round would bring its ε to, so the server stops the run before such a round (fedsuite/server/sample_budget.py).

With batch-clients=true a round's clients train stacked (fedsuite/batched/private.py): the stacked step takes every
client's per-record gradients at once, and each client's `DpSgd` still starts its own noise stream (`start`),
draws its own noise (`draw_noise`, the numbers `release` draws) and counts its own releases, so its noise, ε and
refusal are those of the client trained alone. A loop that bypassed the oracle is caught before anything is
released (`check_trained`).

`SampleLevelStage` is DP-SGD's client stage (fedsuite/stages/client.py): it gives each round's loop its `DpSgd`
oracle, refuses a round past the target before anything is released, and replaces the training losses of the
reply's metrics by the client's ε.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from fedsuite.config.run_config import SampleLevelPrivacy
from fedsuite.models.networks import FlatModel, loss_inputs
from fedsuite.privacy.accountant import RunAccountant
from fedsuite.privacy.model_checks import batch_norm_layers, batch_norm_refusal
from fedsuite.privacy.noise import SECURE, torch_stream
from fedsuite.privacy.per_record import AUTOCAST_REFUSAL, ghost_clipped_sum, ghost_refusal
from fedsuite.server.sampling import Sampler
from fedsuite.stages.client import ClientStage, without_losses

NOISE_STREAM = 0x44505347  # "DPSG": the noise's stream beside the round's minibatch stream
EPSILON_METRIC = "dp-sgd-epsilon"  # a client's ε(δ) in its fit metrics; the round row's `dp_sgd_epsilon` is their max
NEXT_EPSILON_METRIC = "dp-sgd-epsilon-next"  # its ε(δ) should the next round draw it again, with this round's steps


class PrivacyBudgetSpent(RuntimeError):
    """A client's DP-SGD ε would pass dp-target-epsilon in this round: it releases nothing."""


def per_record_gradients(model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor):
    """(losses of shape (B,), gradients of shape (B, d)): each record's loss and the gradient of its loss over the
    model's trainable parameters at the current x, in the order of FlatModel's flat vector."""
    module = model.module
    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    names = [name for name, _ in named]
    params = tuple(p.detach() for _, p in named)

    def record_loss(values, x, y):
        out = functional_call(module, dict(zip(names, values, strict=True)), (x.unsqueeze(0),))
        loss = loss_fn(*loss_inputs(out, y.unsqueeze(0)))
        return loss, loss.detach()

    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=model.autocast == "bf16"):
        grads, losses = vmap(grad(record_loss, has_aux=True), in_dims=(None, 0, 0))(params, inputs, targets)
    flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)
    return losses, flat


def ghost_sum(model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor, clip: float):
    """(the batch's mean loss, the (d,) sum of its records' gradients each clipped to `clip`), by ghost clipping
    (dp-sgd-per-record='ghost', fedsuite/privacy/per_record.py): what `clip_records` of `per_record_gradients`
    sums, without the B × d gradients."""
    if model.autocast != "none":
        raise ValueError(AUTOCAST_REFUSAL)
    params = {name: p for name, p in model.module.named_parameters() if p.requires_grad}
    sums, loss = ghost_clipped_sum(model.module, params, loss_fn, inputs, targets, clip)
    return loss, torch.cat([g.reshape(-1) for g in sums])


def clip_records(grads: torch.Tensor, clip: float) -> torch.Tensor:
    """Scale each row (one record's gradient) in place to L2 norm ≤ clip; rows inside the ball are left as they
    are (factor exactly 1)."""
    factor = torch.clamp(clip / (grads.norm(dim=1) + 1e-12), max=1.0)
    return grads.mul_(factor.unsqueeze(1))


class PrivateModel:
    """The FlatModel a step's oracle sees under DP-SGD: `loss_and_grad` writes a private gradient into `grad`;
    everything else (x, grad, module …) is the model's own."""

    def __init__(self, model: FlatModel, private: DpSgd):
        self._model, self._private = model, private

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def loss_and_grad(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self._private.release(self._model, loss_fn, inputs, targets)


@dataclass
class DpSgd:
    """One client's DP-SGD in one round: the private gradients of its steps and the ε(δ) they bring it to."""

    noise: float  # σ_s
    clip: float  # C_s
    batch: int  # B, every step's batch size
    records: int  # n_i, the client's training records
    delta: float
    sampler: Sampler
    partition_id: int
    server_round: int
    releases: list[int] = field(default_factory=list)  # private gradients released in each step of this round
    target_epsilon: float = 0.0  # dp-target-epsilon: this round releases nothing past it (0 = no target)
    noise_source: str = SECURE  # dp-noise-source (fedsuite/privacy/noise.py)
    per_record: str = "vmap"  # dp-sgd-per-record (fedsuite/privacy/per_record.py)
    _noise_stream: torch.Generator | None = None
    _epsilons: dict[int, float] = field(default_factory=dict)  # more_rounds → ε(δ), once the round's steps are done

    # ---- the local loop's hooks (fedsuite/local/loop.py)
    # ---------------------------------------------------------------
    def bind(self, model: FlatModel, rule, generator: torch.Generator) -> PrivateModel:
        """The model the round's oracle sees (after `start`)."""
        self.start(rule, generator, model.device)
        return PrivateModel(model, self)

    def start(self, rule, generator: torch.Generator, device: torch.device) -> None:
        """The round's noise stream on `device`: secret, or from the round's generator's seed; a rule with a batch
        source of its own is refused. One client's loop (`bind`) and the stacked loop (fedsuite/batched/private.py)
        both start here."""
        if rule.batches is not None:
            raise ValueError("dp-sgd=true: this algorithm's steps train on batches of its own (fixed blocks), not on "
                             "sampled batches the privacy accountant describes")  # fmt: skip
        seed = np.random.SeedSequence([generator.initial_seed(), NOISE_STREAM]).generate_state(1)[0]
        self._noise_stream = torch_stream(self.noise_source, int(seed), device)

    def new_step(self) -> None:
        self.releases.append(0)

    def check_batch(self, records: int) -> None:
        """A step's batch must be the B the accountant counts."""
        if records != self.batch:
            raise ValueError(f"dp-sgd=true: a step trained on {records} records, expected batch size {self.batch}")

    def draw_noise(self, out: torch.Tensor) -> torch.Tensor:
        """`out` filled with N(0, 1) from this client's noise stream: the numbers `torch.randn(out.shape)` would
        draw from it (`out` in the default dtype, as `release` draws them)."""
        return out.normal_(generator=self._noise_stream)

    def release(self, model: FlatModel, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Σ clip(per-record gradient) + N(0, σ_s²C_s²·I), over B, into model.grad; returns the batch's mean loss."""
        self.check_batch(len(targets))
        if self.per_record == "ghost":
            loss, total = ghost_sum(model, loss_fn, inputs, targets, self.clip)
        else:
            losses, grads = per_record_gradients(model, loss_fn, inputs, targets)
            loss, total = losses.mean(), clip_records(grads, self.clip).sum(dim=0)
        if self.noise > 0:  # the draws of the stacked step's too (fedsuite/batched/private.py): one definition
            noise = self.draw_noise(torch.empty(total.shape, device=total.device))
            total.add_(noise, alpha=self.noise * self.clip)
        model.grad.copy_(total.div_(self.batch))
        self.releases[-1] += 1
        return loss.detach()

    # ---- the privacy budget ---------------------------------------------------------------------------------------
    def events(self, rounds: int) -> dict[tuple[float, int, int], int]:
        """The run accountant's events of `rounds` rounds like this one: per step releasing k gradients, the noise
        multiplier σ_s/√k on a batch of B of n records (the library's reduction of k composed Gaussians)."""
        per_round = Counter(self.releases)
        return {(self.noise / math.sqrt(k), self.batch, self.records): rounds * steps
                for k, steps in sorted(per_round.items()) if k > 0}  # fmt: skip

    def epsilon(self, more_rounds: int = 0) -> float:
        """This client's ε(δ) after this round: every round so far whose cohort drew it, each like this one (plus
        `more_rounds` like it); computed once per round and number (the steps' releases are final once asked)."""
        if more_rounds not in self._epsilons:
            rounds = participations(self.sampler, self.partition_id, self.server_round) + more_rounds
            self._epsilons[more_rounds] = RunAccountant(self.delta, self.events(rounds)).epsilon()
        return self._epsilons[more_rounds]

    def check_trained(self) -> None:
        """Raise, before anything is released, when no local loop took this round's gradients through this oracle
        (an engine that trained the client without it): its update would carry no noise."""
        if self._noise_stream is None or not any(self.releases):
            raise RuntimeError(f"dp-sgd=true: client {self.partition_id}'s local loop took no private gradient "
                               "this round; nothing of it is released")  # fmt: skip

    def check_budget(self) -> None:
        """Raise PrivacyBudgetSpent, before anything of this round is released, when it takes ε past the target."""
        if self.target_epsilon <= 0:
            return
        after = self.epsilon()
        if after > self.target_epsilon:
            raise PrivacyBudgetSpent(
                f"dp-target-epsilon={self.target_epsilon:g}: this round would take the DP-SGD ε of client "
                f"{self.partition_id} to {after:.4g} (dp-sgd-noise={self.noise:g}, batches of {self.batch} of "
                f"{self.records} records, {len(self.releases)} steps); nothing of it is released"
            )

    def fit_metrics(self, metrics: dict) -> dict:
        """The fit metrics a private client sends: its ε(δ) now and should one more round draw it, and not the
        training losses of its records."""
        kept = without_losses(metrics)
        return {**kept, EPSILON_METRIC: self.epsilon(), NEXT_EPSILON_METRIC: self.epsilon(more_rounds=1)}


def for_client(node, server_round: int) -> DpSgd | None:
    """The round's DP-SGD of `node` (a fedsuite.node.holdings.ClientNode), or None when dp-sgd is off. A model with
    BatchNorm is refused: its batch statistics mix the records of a batch, so no per-record gradient exists."""
    settings = SampleLevelPrivacy.from_values(node.cfg)
    if not settings.enabled:
        return None
    norms = batch_norm_layers(node.model.module)
    if norms:
        raise ValueError(batch_norm_refusal(node.cfg.model, norms))
    refused = ghost_refusal(node.model.module) if settings.per_record == "ghost" else None
    if refused is not None:
        raise ValueError(refused)
    n, batch_size = len(node.data), node.cfg.local.batch_size
    batch = n if batch_size <= 0 else min(batch_size, n)
    sampler = Sampler.of_run(node.cfg)
    return DpSgd(settings.noise, settings.clip, batch, n, settings.delta, sampler, node.partition_id, server_round,
                 target_epsilon=settings.target_epsilon, noise_source=settings.noise_source,
                 per_record=settings.per_record)  # fmt: skip


class SampleLevelStage(ClientStage):
    """DP-SGD on the client's side of a round (module docstring): the round's private oracle, the target's refusal,
    the reply's ε instead of its training losses. The batched engine trains its clients stacked, each with its own
    oracle (fedsuite/batched/private.py)."""

    trains_alone = None  # the stacked loop takes each client's private gradients (docs/privacy-dp-sgd.md)

    @classmethod
    def of_run(cls, cfg) -> SampleLevelStage | None:
        """The stage of a resolved run config, or None with dp-sgd=false."""
        return cls() if SampleLevelPrivacy.from_values(cfg).enabled else None

    def prepare(self, node, ctx) -> DpSgd | None:
        return for_client(node, ctx.round)

    def before_release(self, fit) -> None:
        fit.private.check_trained()  # a loop that bypassed the oracle: nothing released
        fit.private.check_budget()  # past dp-target-epsilon: nothing released, no state moved

    def metrics(self, metrics, fit):
        return fit.private.fit_metrics(metrics)


_COUNTED: dict[tuple[Sampler, int], tuple[int, int]] = {}  # (sampler, partition) → (round, rounds drawn so far)
_COUNT_LOCK = threading.Lock()


def participations(sampler: Sampler, partition_id: int, server_round: int) -> int:
    """How many of the rounds 1..server_round drew `partition_id` into their cohort (counted on from the last
    answer in this process)."""
    with _COUNT_LOCK:
        start, count = _COUNTED.get((sampler, partition_id), (0, 0))
        if start > server_round:
            start, count = 0, 0
        for r in range(start + 1, server_round + 1):
            count += partition_id in sampler.cohort(r)
        _COUNTED[(sampler, partition_id)] = (server_round, count)
        return count
