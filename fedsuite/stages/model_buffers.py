"""The model's buffers (BatchNorm statistics) on the client, beside every algorithm, as a client stage
(fedsuite/stages/client.py): with buffers='average' the client starts each round, and each evaluation, from the
server's buffers (the downlink array `buffers`) and returns its own after training (an extra uplink array the server
averages outside the rule, fedsuite/server/buffers.py); with buffers='local' they are this client's declared state
(fedsuite.rules.declared.model_state), from the model's initial ones before its first round. No rule hook sees them.
A buffer-free model has no such stage. The batched engine trains a run with it one client at a time: a forward pass
updates the buffers per client (docs/running/batched.md)."""

from __future__ import annotations

from typing import Any

import torch

from fedsuite.rules.declared import BUFFERS
from fedsuite.stages.client import ClientStage

TRAINS_ALONE = "the model has buffers (BatchNorm statistics), which a forward pass updates per client"


class ModelBuffers(ClientStage):
    trains_alone = TRAINS_ALONE

    def __init__(self, client_rule: Any, mode: str):
        """`client_rule`: the client's ClientRule (its state, under buffers='local'); `mode`: 'average' or 'local'."""
        self.client_rule, self.mode = client_rule, mode

    @classmethod
    def of_client(cls, cfg, client_rule: Any) -> ModelBuffers | None:
        """The stage of a client whose model has buffers, else None."""
        return cls(client_rule, cfg.buffers) if client_rule.node.model.buffers.numel() else None

    def receive(self, down: dict, node) -> None:
        """The buffers this round trains (or this evaluation runs) from: the server's (buffers='average'), this
        client's own (buffers='local', read only here)."""
        sent = down.pop(BUFFERS.name, None)
        buffers = node.model.buffers
        if self.mode == "local":
            state = self.client_rule.state
            has = state is not None and state.has(BUFFERS.name)
            buffers.copy_(state.get(BUFFERS.name) if has else node.initial_buffers())
        elif sent is not None:
            buffers.copy_(sent)
        else:
            raise ValueError("configuration mismatch: the model has buffers but the server sent none; give server and "
                             "clients the same model and buffers setting")  # fmt: skip

    def uplink(self, result, fit, node) -> dict[str, torch.Tensor]:
        """buffers='average': the trained buffers go back beside the algorithm's arrays; 'local': they are kept."""
        buffers = node.model.buffers
        if self.mode == "local":
            self.client_rule.state.set(BUFFERS.name, buffers)
            return {}
        return {BUFFERS.name: buffers.clone()}
