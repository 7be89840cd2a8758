"""Relaxed initialisation (relaxed-init = β > 0, docs/running/relaxed-init.md) as a client stage
(fedsuite/stages/client.py): each client starts its round at x_{i,0} = x^t + β(x^t − x_i^last), x_i^last its last
local model (x^0 before its first round, as the FedSpeed authors' simulator starts every client's), kept in its
state (fedsuite.rules.declared.LAST_ITERATE); a client rule that uploads the start shift x_{i,0} − x^t
(ClientRule.uploads_start_shift: the rules whose server averages the clients' last models) sends it as
`start_shift`."""

from __future__ import annotations

from typing import Any

import torch

from fedsuite.rules.declared import LAST_ITERATE
from fedsuite.stages.client import ClientStage

START_SHIFT = "start_shift"  # the uplink array x_{i,0} − x^t


class RelaxedStart(ClientStage):
    def __init__(self, client_rule: Any, beta: float):
        """`client_rule`: the client's ClientRule (its state and whether it uploads the shift); `beta`: β."""
        self.client_rule, self.beta = client_rule, beta

    @classmethod
    def of_client(cls, cfg, client_rule: Any) -> RelaxedStart | None:
        """The stage under relaxed-init > 0, else None."""
        beta = cfg.local.relaxed_init
        return cls(client_rule, beta) if beta else None

    def start(self, down: dict, node) -> torch.Tensor:
        """Replace x^t in `down` by this client's start x_{i,0} and return the shift x_{i,0} − x^t."""
        state = self.client_rule.state
        x_t = down["model"]
        last = state.get(LAST_ITERATE.name) if state.has(LAST_ITERATE.name) else node.initial_x()
        shift = (x_t - last).mul_(self.beta)
        down["model"] = x_t + shift
        return shift

    def uplink(self, result, fit, node) -> dict[str, torch.Tensor]:
        return {START_SHIFT: fit.started[self]} if self.client_rule.uploads_start_shift else {}

    def before_save(self, result, fit) -> None:
        self.client_rule.state.set(LAST_ITERATE.name, result.x)  # x_i^last of the next round
