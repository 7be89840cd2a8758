"""What each algorithm reveals to a curious server, captured from a real in-process run (docs/dlg/index.md).

`MESSAGES` is the study's table: a study name → the registry algorithm that runs, the run-config keys it forces,
and where its message comes from: `delta` = the client's uplink Δ = x_1^+ − x^t, read as the pseudo-gradient
(x^t − x_1^+)/(η·T) (with one full-batch step this is ∇F_1(x) exactly: DSGD); `query` = MimeSVRG's phase-A
upload ∇F_1(x^t) (seen by a round observer of the query). Adding an algorithm is one entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from fedsuite.config.run_config import SCHEMA
from fedsuite.config.settings import value_of
from fedsuite.dlg.attack import pseudo_gradient
from fedsuite.registry import known as registry
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.observers import RoundObserver


@dataclass(frozen=True)
class Message:
    algorithm: str  # registry name
    source: str  # "delta" or "query"
    reveals: str  # for the table
    overrides: dict = field(default_factory=dict)


MESSAGES: dict[str, Message] = {
    "dsgd": Message("fedavg", "delta", "∇F_1(x) = −Δ/η (one full-batch step)", {"local-steps": 1}),
    "mimesvrg": Message("mimesvrg", "query", "∇F_1(x^t), its phase-A upload"),
    "fedavg": Message("fedavg", "delta", "(x^t − x_1^+)/(η·T)"),
    "scaffold": Message("scaffold", "delta", "(x^t − x_1^+)/(η·T)"),
    "losac": Message("losac", "delta", "(x^t − x_1^+)/(η·T), M = 1", {"losac-blocks": 1}),
}


def available(name: str) -> str | None:
    """None when `name` can run here, else why not (e.g. the algorithm is not in this checkout's registry)."""
    if name not in MESSAGES:
        return f"unknown message {name!r}: known are {', '.join(MESSAGES)}"
    msg = MESSAGES[name]
    if msg.algorithm not in registry.ALGORITHMS:
        return f"algorithm {msg.algorithm!r} is not in this checkout's registry"
    missing = [k for k in msg.overrides if k not in SCHEMA]
    if missing:
        return f"run-config keys {', '.join(missing)} are not in this checkout's config"
    return None


@dataclass
class Captured:
    name: str
    x: np.ndarray  # the model x^t the message was computed at
    gradient: np.ndarray  # the revealed (pseudo-)gradient of the client's mean loss
    num_examples: int  # n_1, the size of the attacked batch
    lr: float  # η the client used (delta messages)
    steps: int  # T the client took (delta messages)


def run_config_for(name: str, run_config: Mapping, attack_round: int) -> dict:
    msg = MESSAGES[name]
    return {**run_config, **msg.overrides, "algorithm": msg.algorithm, "num-server-rounds": attack_round}


def capture(name: str, run_config: Mapping, attack_round: int, partition: int) -> Captured:
    """Train `name` for `attack_round` rounds and return what client `partition` revealed in the last one."""
    reason = available(name)
    if reason:
        raise ValueError(reason)
    msg, cfg = MESSAGES[name], run_config_for(name, run_config, attack_round)
    seen = Seen(attack_round, partition)
    run_inprocess(cfg, observers=[seen])
    reply = seen.reply
    if reply is None:
        raise RuntimeError(f"{name}: client {partition} sent no valid reply in round {attack_round}")
    # A sum-reduced loss (loss-reduction=sum, the LoSAC paper's) scales each step's gradient by the batch size.
    scale = reply.num_examples if value_of(cfg, "loss-reduction") == "sum" else 1
    if msg.source == "query":
        if seen.query is None:
            raise RuntimeError(f"{name}: no phase-A gradient of client {partition} in round {attack_round}")
        x, answer = seen.query
        return Captured(name, np.asarray(x, np.float64), answer.vector, reply.num_examples, reply.lr, 1)
    grad = pseudo_gradient(torch.from_numpy(reply.arrays["delta"]), reply.lr, reply.steps).numpy() / scale
    return Captured(name, seen.x, grad, reply.num_examples, reply.lr, reply.steps)


class Seen(RoundObserver):
    """What one client revealed in one round: its reply, the model x^t it started from, its query answer."""

    def __init__(self, attack_round: int, partition: int):
        self.attack_round, self.partition = attack_round, partition
        self.reply, self.x, self.query = None, None, None

    def queried(self, server_round, x, answers):
        if server_round == self.attack_round and self.partition in answers:
            self.query = (x, answers[self.partition])

    def aggregated(self, server_round, strategy, x_before, replies):
        if server_round == self.attack_round:
            self.x = np.asarray(x_before, np.float64).copy()
            self.reply = next((r for r in replies if r.partition_id == self.partition), None)
