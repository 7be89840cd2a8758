"""The client: local SGD whose step stage is heavy-ball momentum, m ← μ m + d, x ← x − η_l m, with the buffer m
kept across the client's rounds as declared client state m_i (zeros before its first round).

A step stage with persistent state, in three places:
    state_specs   declares m_i, so fedsuite stores it per client, checkpoints it and undoes it when the server
                  rejects the client's reply;
    rule          loads m_i into this round's stage before the local loop;
    uplink        saves the stage's final buffer after the loop (fedsuite writes it once the uplink is complete).
μ = 0 is FedAvg bit for bit.
"""

from __future__ import annotations

import torch
from fedsuite.local.loop import StepContext, UpdateRule
from fedsuite.rules.client_rule import ClientRule
from fedsuite.rules.declared import Vector


class MomentumStep:
    """The step stage: m ← μ m + d; the move is m. `m` holds the buffer after the round's last step."""

    def __init__(self, m: torch.Tensor, mu: float):
        self.m, self.mu = m.clone(), mu

    def __call__(self, d: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        self.m.mul_(self.mu).add_(d)
        return d.copy_(self.m)  # the move, in the direction's buffer: later stages may edit it, never m


class LocalMomentumClient(ClientRule):
    def __init__(self, node, mu: float = 0.9):
        super().__init__(node)
        self.mu = mu

    @classmethod
    def state_specs(cls, cfg):
        return (Vector("m_i", "float32"),)

    def rule(self, ctx) -> UpdateRule:
        return UpdateRule(step=MomentumStep(self.state.get("m_i"), self.mu))

    def uplink(self, result, rule, ctx):
        self.state.set("m_i", rule.step.m)
        return {"delta": result.x - result.x0}
