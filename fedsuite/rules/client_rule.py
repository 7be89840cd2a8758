"""The client half every algorithm is written as, without Flower: `ClientRule` and the `RoundContext` its hooks get.

An algorithm's client (clients/<name>.py) subclasses `ClientRule` and says only
- `state_specs(cfg)` (classmethod): the persistent vectors each of its clients keeps (fedsuite.rules.declared; none:
  stateless), read and written through `self.state` (this partition's declared vectors and the model's own, as the
  run's state plan puts them together, fedsuite.state.plan.client_specs, loaded lazily from the node's store);
- `rule(ctx)`: the `UpdateRule` this round's local loop trains with (fedsuite.local.loop);
- `uplink(result, rule, ctx)`: the named arrays that go back, from the loop's result and the rule the round built
  (so stages it reads afterwards, e.g. an Adam stage's final v, are named in `rule.parts`, never kept on `self`);
- `answer(ctx)`: its answer to a server query sent before the round's training (fedsuite.rules.rounds.Query; MimeSVRG's
  full gradient), named arrays; by default none.

Everything Flower-shaped (decoding the message, the state acknowledgement, the model's buffers, the configuration
check, the local loop, the finiteness check, the state save, error replies, evaluation) is the adapter's,
fedsuite/node/client.py, the one `NumPyClient` of every algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from fedsuite.config.schema import Scalar
from fedsuite.local.loop import LocalResult, Transform, UpdateRule, prox_terms
from fedsuite.local.variance import FixedBlocks
from fedsuite.rules.declared import StateSpec


@dataclass(frozen=True)
class RoundContext:
    """What the server sent this client for one message, decoded: every hook reads this, never the wire."""

    round: int  # the server round the message belongs to
    lr: float | None  # η_l of this round's local steps (None in a query, which trains nothing)
    down: Mapping[str, torch.Tensor]  # the downlink arrays by name on the node's device: "model" is x^t, then the
    # server rule's own (`sends`, `sends_each`); the model's buffers are taken out before any hook sees them
    phase: str | None = None  # the server query this message asks (fedsuite.rules.rounds.Query.phase); None: training
    tracked: bool = False  # this client is in the round's tracking subset Y^t (FAdamET/GT, docs/algorithms/fadamet.md)
    scalars: Mapping[str, Scalar] = field(default_factory=dict)  # the server rule's other per-round scalars, by key
    # (fedsuite.rules.server_rule.ServerRule.fit_config), for a plug-in rule that sends its client one


class ClientRule:
    """An algorithm's client: its declared state, local rule, uplink and query answer (module docstring)."""

    # Under relaxed-init > 0 the adapter starts the round at x_{i,0} = x^t + β(x^t − x_i^last) and hands the rule that
    # point as ctx.down["model"]; a client whose server averages the clients' last models (FedDyn's family) also
    # uploads the shift x_{i,0} − x^t as "start_shift" (docs/running/relaxed-init.md).
    uploads_start_shift: bool = False

    def __init__(self, node: Any):  # a fedsuite.node.holdings.ClientNode (fedsuite.app: its own node of the same shape)
        self.node = node
        self.state = node.state_of(type(self))  # its declared state with the run's own, from the run's state plan

    # ---- algorithm hooks -------------------------------------------------------------------------
    @classmethod
    def state_specs(cls, cfg: Any) -> tuple[StateSpec, ...]:  # cfg: a resolved fedsuite.config.run_config.Config
        """The persistent vectors each client of this algorithm keeps under `cfg` (none: stateless)."""
        return ()

    def rule(self, ctx: RoundContext) -> UpdateRule:
        """The update rule of this round's local loop (default: plain local SGD)."""
        return UpdateRule()

    def uplink(self, result: LocalResult, rule: UpdateRule, ctx: RoundContext) -> dict[str, torch.Tensor]:
        """The arrays that go back after the local loop (default: the displacement Δ_i = x_{i,K} − x^t)."""
        return {"delta": result.x - result.x0}

    def answer(self, ctx: RoundContext) -> dict[str, torch.Tensor] | None:
        """The named arrays answering the server query `ctx.phase`; None: this algorithm answers no query."""
        return None

    # ---- helpers for algorithms ------------------------------------------------------------------
    def blocks(self) -> FixedBlocks:
        """This client's M fixed data blocks (`losac-blocks`, docs/algorithms/losac.md)."""
        node = self.node
        return FixedBlocks(len(node.data), node.cfg.local.blocks, node.cfg.seed, node.partition_id)

    def prox_terms(self, mu: float, centre: torch.Tensor | None = None) -> tuple[tuple[Transform, ...], ...]:
        """(clipped, unclipped) halves of + μ(x − centre) under the run's clip-scope
        (fedsuite.local.loop.prox_terms)."""
        return prox_terms(mu, centre, self.node.cfg.local.clip_scope)
