"""What a curious server observes of one client's upload under each privacy defence, captured from a real
in-process run (docs/dlg/defences.md).

`DEFENCES` is the study's table: a name → the run-config keys that switch the defence on and what the server
observes. The capture is the reply the server's rule receives for the attacked client, read by a round observer:
client-level DP with dp='clients' leaves the client's noise share on it, dp='server' does not (the server adds the
noise to the sum itself), and under SecAgg+ every reply holds the cohort's mean (docs/privacy-secagg.md). The
attacker reads it as the pseudo-gradient (x^t − x_1^+)/(η·T) (fedsuite.dlg.attack.pseudo_gradient). Adding a defence is
one entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from fedsuite.dlg.attack import pseudo_gradient
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.observers import RoundObserver


@dataclass(frozen=True)
class Defence:
    observes: str  # what the server sees of the attacked client, for the table
    overrides: dict = field(default_factory=dict)


DEFENCES: dict[str, Defence] = {
    "none": Defence("client 1's update Δ_1"),
    "dp-server-2": Defence(
        "Δ_1 clipped to C (the server adds the σ = 2 noise to the sum itself)", {"dp": "server", "dp-noise": 2.0}
    ),
    "dp-clients-0.5": Defence(
        "Δ_1 clipped to C plus its noise share, std 0.5·C/√S", {"dp": "clients", "dp-noise": 0.5}
    ),
    "dp-clients-2": Defence("Δ_1 clipped to C plus its noise share, std 2·C/√S", {"dp": "clients", "dp-noise": 2.0}),
    "secagg": Defence("the cohort's mean of Δ_i (SecAgg+)", {"secagg": True}),
    "secagg-dp-clients-0.5": Defence(
        "the cohort's mean of the clipped Δ_i with their noise shares, std 0.5·C/S",
        {"secagg": True, "dp": "clients", "dp-noise": 0.5},
    ),
}


def unknown(names: Sequence[str]) -> str | None:
    """None when every name is a defence of the table, else a one-line reason naming the allowed ones."""
    bad = [n for n in names if n not in DEFENCES]
    if bad:
        return f"unknown defence {', '.join(map(repr, bad))}: allowed are {', '.join(DEFENCES)}"
    return None


@dataclass
class Observation:
    server_round: int
    x: np.ndarray  # the model x^t the clients started the round from
    delta: np.ndarray  # the arrays' `delta` of the attacked client's reply, as the server's rule received it
    gradient: np.ndarray  # the attacker's reading of it: (x^t − x_1^+)/(η·T)
    cohort: list[int]  # the partitions whose replies entered the round


class Observed(RoundObserver):
    """The attacked client's reply in each of `rounds` as the server receives it (`screen` sees every validated
    reply on arrival, before a dp='server' run adds its own noise), and the model x^t the round started from."""

    def __init__(self, rounds: Sequence[int], partition: int):
        self.rounds, self.partition = set(rounds), partition
        self.received: dict[int, object] = {}
        self.seen: dict[int, Observation] = {}

    def screen(self, server_round, reply):
        if server_round in self.rounds and reply.partition_id == self.partition:
            self.received[server_round] = (np.array(reply.arrays["delta"], copy=True), reply.lr, reply.steps)
        return None

    def aggregated(self, server_round, strategy, x_before, replies):
        if server_round not in self.received:
            return
        delta, lr, steps = self.received[server_round]
        grad = pseudo_gradient(torch.from_numpy(delta.astype(np.float64)), lr, steps).numpy()
        cohort = sorted(r.partition_id for r in replies if r.partition_id >= 0)
        self.seen[server_round] = Observation(
            server_round, np.asarray(x_before, np.float64).copy(), delta, grad, cohort
        )


def run_config_for(name: str, run_config: Mapping, rounds: int) -> dict:
    return {**run_config, **DEFENCES[name].overrides, "num-server-rounds": rounds}


def capture(name: str, run_config: Mapping, rounds: Sequence[int], partition: int) -> list[Observation]:
    """Train under defence `name` up to the last of `rounds`; what the server observed of `partition` in each."""
    reason = unknown([name])
    if reason:
        raise ValueError(reason)
    observed = Observed(rounds, partition)
    run_inprocess(run_config_for(name, run_config, max(rounds)), observers=[observed])
    missing = [r for r in rounds if r not in observed.seen]
    if missing:
        raise RuntimeError(f"{name}: client {partition} sent no valid reply in round(s) {missing}")
    return [observed.seen[r] for r in sorted(rounds)]
