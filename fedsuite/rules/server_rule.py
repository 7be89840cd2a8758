"""The server rule every algorithm's server half is written as: its state, its downlink, its aggregate.

No Flower here. `fedsuite.server.adapter.RuleStrategy` makes a rule a Flower `Strategy` (routing, payloads, reply
validation, the run guard, recording, checkpoints); a rule only says

    state           its declared server state (fedsuite.rules.declared): created here, checkpointed from the declaration
    sends           names of the d-vectors every sampled client gets beside the model (attributes of the rule),
    sends_each      … and the names each client gets for itself (`client_downlink`),
    uplink          the d-vectors every client returns, `uplink_some` those only some clients return,
    query           an optional exchange before the round's training (`fedsuite.rules.rounds.Query`, MimeSVRG),
    aggregate()     how the validated replies become the new global model (and the new state);
optionally which model is evaluated (`evaluation_model`, x by default) and numbers for the round's row
(`round_figures`, none by default).

A rule's vectors are NumPy arrays on the host, or tensors on the training device where the run places them there
(`place`, fedsuite/rules/vectors.py): a rule class whose own body says `runs_on_device = True` is written with the
operators and `self.vectors` only, so its arithmetic runs on either unchanged.

The declarations are also what the registry's communication table is derived from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsuite.codec.device_arrays import all_on_device
from fedsuite.rules.declared import StateSpec, Vector, check_state
from fedsuite.rules.rounds import Answer, Query, Reply
from fedsuite.rules.vectors import HOST, HostVectors, host_array
from fedsuite.server import blockwise
from fedsuite.server.sampling import Sampler

__all__ = ["Answer", "Query", "Reply", "RuleSettings", "ServerRule"]

MODEL = Vector("x", "float32")  # the global model, part of every rule's state


@dataclass(frozen=True)
class RuleSettings:
    """What a rule reads from the run config (built by fedsuite.server.app)."""

    initial_x: np.ndarray
    sampler: Sampler
    lr: float  # η_l^0
    lr_decay: float = 1.0  # γ: η_l in round t (counted from 1) is η_l^0 γ^(t−1)
    weighting: str = "uniform"  # or "samples": cohort means weighted by n_i
    agg_scale: str = "mean"  # or "1/N": Σ_S Δ_i / N, the LoSAC paper's eq. (13)
    # client-level DP with Poisson sampling: cohort means divide the (noisy) sum by the expected cohort p·N, never by
    # the realised |S|, whose value would depend on whether one client took part (docs/privacy.md)
    expected_cohort: float | None = None
    relaxed_init: float = 0.0  # β of relaxed initialisation: clients start at x^t + β(x^t − x_i^last), 0 = off
    # (docs/running/relaxed-init.md); rules that average the clients' last models then need each start's shift
    extra: Mapping[str, Any] = field(default_factory=dict)  # unused by the built-ins; for plug-in rules


def missing_aggregate(rule: type) -> str:
    """The one line that refuses a rule class without its own `aggregate`."""
    return (f"server rule {rule.__module__}:{rule.__qualname__} does not define aggregate(server_round, replies), "
            "which returns the new global model from the round's replies")  # fmt: skip


class ServerRule:
    state: tuple[StateSpec, ...] = ()
    sends: tuple[str, ...] = ()
    sends_each: tuple[str, ...] = ()
    uplink: tuple[str, ...] = ("delta",)
    uplink_some: tuple[str, ...] = ()
    query: Query | None = None
    vectors: HostVectors = HOST  # where x and the state live (fedsuite/rules/vectors.py); `place` moves them
    runs_on_device = False  # a class that says True in its own body may be placed there (fedsuite/server/placement.py)

    def __init__(self, settings: RuleSettings):
        if type(self).aggregate is ServerRule.aggregate:
            raise TypeError(missing_aggregate(type(self)))
        self.settings = settings
        self.x = np.asarray(settings.initial_x, dtype=np.float32).copy()
        self.dim = self.x.size
        for spec in self.state_specs():
            setattr(self, spec.name, spec.initial(self.dim))

    # ---- declarations ----------------------------------------------------------------------------
    def state_specs(self) -> tuple[StateSpec, ...]:
        """The declared server state (override when it depends on a hyper-parameter)."""
        return self.state

    def state_dict(self) -> dict[str, Any]:
        """The global model and the declared state, by name (checkpoints), as host arrays wherever they live."""
        state = {MODEL.name: self.x, **{spec.name: getattr(self, spec.name) for spec in self.state_specs()}}
        return state if not self.vectors.on_device else {k: HOST.held(v) for k, v in state.items()}

    def load_state_dict(self, values: Mapping[str, Any]) -> None:
        check_state((MODEL, *self.state_specs()), values, self.dim, type(self).__name__)
        for name, value in values.items():
            setattr(self, name, self.vectors.held(value))

    def place(self, vectors: HostVectors) -> None:
        """Hold x and the declared state with `vectors` from now on (the same values: fedsuite/rules/vectors.py)."""
        for name, value in self.state_dict().items():
            setattr(self, name, vectors.held(value))
        self.vectors = vectors

    # ---- algorithm hooks -------------------------------------------------------------------------
    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        """Extra d-vectors for every sampled client: by default the attributes named in `sends`."""
        return {name: getattr(self, name) for name in self.sends}

    def client_downlink(self, server_round: int, partition_id: int) -> dict[str, np.ndarray]:
        """Extra d-vectors for one client only (the names in `sends_each`)."""
        return {}

    def fit_config(self, server_round: int) -> dict[str, Any]:
        """Extra scalars for this round's clients."""
        return {}

    def expected_uplink(self, server_round: int, partition_id: int) -> tuple[str, ...]:
        """The array names this client must return this round."""
        return self.uplink

    def answered(self, server_round: int, answers: Mapping[int, Answer]) -> None:
        """The valid answers to this round's `query`, before the fit instructions are built."""

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """New global model from the validated replies (in partition order); updates the state. Every rule defines
        it and returns the new model: a rule without it is refused when it is registered or built."""
        raise NotImplementedError(missing_aggregate(type(self)))

    def empty_round(self, server_round: int) -> None:
        """A round without a valid reply keeps x: record it as a zero move in any history the rule extrapolates
        from (FedMIM's δ's, FedSpeed-Ing's x^{t−1})."""

    def evaluation_model(self) -> np.ndarray:
        """The model the server evaluates centrally and sends for federated evaluation: x itself by default
        (FedExP's option: the mean of its last two iterates). Training always continues from x."""
        return self.x

    def round_figures(self, server_round: int) -> dict[str, float]:
        """Numbers of the round just aggregated for its results row (FedExP's η_g^t as `server_lr`); none by
        default."""
        return {}

    # ---- helpers ---------------------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return self.settings.sampler.num_clients

    def local_lr(self, server_round: int) -> float:
        return self.settings.lr * self.settings.lr_decay ** (server_round - 1)

    def cohort_mean(self, replies: Sequence[Reply], value: str | Callable[[Reply], np.ndarray]) -> np.ndarray:
        """mean_S of a named uplink array (or of value(reply)): uniform, or weighted by n_i (weighting='samples')."""
        expected = self.settings.expected_cohort
        weights = None if expected is not None else self.cohort_weights(replies)
        if isinstance(value, str) and all_on_device([r.arrays for r in replies], value):  # the same sums, on the device
            return self._held(device_mean([r.arrays.tensor(value) for r in replies], weights, expected, self.dim))
        get = (lambda r: r.arrays[value]) if isinstance(value, str) else value
        if self.vectors.on_device:  # the rule's own vectors: tensors already
            return device_mean((get(r) for r in replies), weights, expected, self.dim, self.vectors.device)
        if expected is not None:  # uniform weights (dp refuses 'samples'), fixed denominator
            return sum((get(r) for r in replies), np.zeros(self.dim, np.float64)) / expected
        out = np.zeros(self.dim, np.float64)
        # out += w_i·v_i in reply order, each block of coordinates on its own (fedsuite/server/blockwise.py): every
        # element gets the operations of one whole-vector pass, in the same order, so the sum is the same bit for bit
        if isinstance(value, str):  # the vectors are there already: each block takes all of them at once
            _add_weighted(out, list(zip(weights, (r.arrays[value] for r in replies), strict=True)))
        else:  # one computed vector at a time
            for weight, r in zip(weights, replies, strict=True):
                _add_weighted(out, [(weight, value(r))])
        return out

    def cohort_weights(self, replies: Sequence[Reply]) -> np.ndarray:
        """The weights of `cohort_mean` without a fixed denominator: uniform, or n_i / Σ n (weighting='samples')."""
        w = np.array([r.num_examples if self.settings.weighting == "samples" else 1.0 for r in replies], np.float64)
        w /= w.sum()
        return w

    def cohort_size(self, replies: Sequence[Reply]) -> float:
        """|S| of the round, or the expected cohort p·N where the means use it (RuleSettings.expected_cohort)."""
        expected = self.settings.expected_cohort
        return float(len(replies)) if expected is None else expected

    def displacement(self, replies: Sequence[Reply], name: str = "delta") -> np.ndarray:
        """The aggregate model move before η_g: mean_S(Δ_i), or Σ_S Δ_i / N with agg-scale='1/N'."""
        if self.settings.agg_scale == "1/N":
            if all_on_device([r.arrays for r in replies], name):
                tensors = [r.arrays.tensor(name) for r in replies]
                return self._held(device_mean(tensors, None, self.num_clients, self.dim))
            if self.vectors.on_device:
                vectors = (r.arrays[name] for r in replies)
                return device_mean(vectors, None, self.num_clients, self.dim, self.vectors.device)
            return sum(r.arrays[name] for r in replies) / self.num_clients
        return self.cohort_mean(replies, name)

    def _held(self, mean: torch.Tensor):
        """A mean formed on the device where the rule's vectors are: kept there, or brought to the host."""
        return mean if self.vectors.on_device else host_array(mean)


def device_mean(tensors: Iterable[torch.Tensor], weights: np.ndarray | None, denominator: float | None, dim: int,
                device: torch.device | None = None) -> torch.Tensor:  # fmt: skip
    """`cohort_mean` of device tensors (float32 uplinks, or the float64 vectors of a rule on the device), on their
    device, as a float64 tensor equal bit for bit to the host path's array: out += w_i·float64(v_i) in reply order,
    each product and sum rounded once as there (two kernels, never one fused multiply-add); or Σ float64(v_i) /
    denominator (a fixed expected cohort). No tensor: zeros of size `dim` (on `device`), as the host path gives."""
    out = None
    for i, vector in enumerate(tensors):
        wide = vector.to(torch.float64, copy=True)  # its own: the reply's tensor is never changed
        if out is None:
            out = torch.zeros(wide.shape, dtype=torch.float64, device=wide.device)
        out.add_(wide if weights is None else wide.mul_(float(weights[i])))
    if out is None:
        out = torch.zeros(dim, dtype=torch.float64, device=device)
    if denominator is not None:  # a divisor tensor: a scalar one may become a multiplication by its reciprocal
        out.div_(torch.full_like(out, denominator))
    return out


def _add_weighted(out: np.ndarray, terms: Sequence[tuple[float, np.ndarray]]) -> None:
    """out += Σ weight·vector, term after term, a block of coordinates at a time on the block threads."""

    def block(span: tuple[int, int]) -> None:  # in cache-sized pieces, the temporary made once
        term = np.empty(min(blockwise.BLOCK, span[1] - span[0]))
        for a in range(span[0], span[1], blockwise.BLOCK):
            b = min(a + blockwise.BLOCK, span[1])
            for weight, vector in terms:
                out[a:b] += np.multiply(weight, vector[a:b], out=term[: b - a])

    blockwise.each(blockwise.spans(out.size), block)
