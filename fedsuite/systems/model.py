"""`SystemModel`: the one place the server decides what each sampled client does in a round (docs/running/systems.md).

Built once per run from its resolved config (the seed included); the strategy asks it, per round, which clients of
the cohort get no instruction (`absent`: drop-outs, and late clients under a deadline with policy 'drop'), and per
client for the entries of its fit config (`fit_config`: its K_i); it adds what `cohort_figures` and `round_figures`
return to the round's row. Its parts: the local-work plan (fedsuite/systems/work.py), drop-outs
(fedsuite/systems/dropout.py), the round deadline (fedsuite/systems/deadline.py) and client availability
(fedsuite/systems/availability.py; the sampler draws from the available clients, this model only counts them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsuite.rules.rounds import Reply
from fedsuite.stages.client import STEPS_KEY  # the fit-config entry of a client's K_i for the round
from fedsuite.systems import dropout
from fedsuite.systems.availability import Availability
from fedsuite.systems.deadline import Deadline
from fedsuite.systems.dropout import Dropouts
from fedsuite.systems.work import LocalWork


@dataclass(frozen=True)
class SystemModel:
    work: LocalWork = field(default_factory=LocalWork)
    dropouts: Dropouts = field(default_factory=Dropouts)
    deadline: Deadline = field(default_factory=Deadline)
    availability: Availability | None = None

    @classmethod
    def from_run_config(cls, values: Mapping[str, Any]) -> SystemModel:
        """The model of a resolved run config (a fedsuite.config.run_config.Config or its dict); a config without the
        system keys (e.g. a plan built by hand) is the model that decides nothing."""
        return cls(LocalWork.from_values(values), Dropouts.from_values(values), Deadline.from_values(values),
                   Availability.from_values(values))  # fmt: skip

    @property
    def on(self) -> bool:
        """Whether it decides anything: off, no client is left out, no fit config entry and no row column is added."""
        return self.work.on or self.dropouts.on or self.deadline.on or self.availability is not None

    def planned_steps(self, server_round: int, partition_id: int) -> int | None:
        """K_i as local-work plans it (None under equal work: the run's local-steps)."""
        return self.work.steps(server_round, partition_id)

    def absent(self, server_round: int, cohort: Sequence[int]) -> dict[int, str]:
        """The sampled clients that get no instruction this round, each with the reason clients.log shows:
        drop-outs, then the clients late for the deadline (policy 'drop')."""
        left_out = {}
        for pid in cohort:
            if self.dropouts.dropped(server_round, pid):
                left_out[pid] = dropout.REASON
            elif self.deadline.drops:
                planned = self._planned(server_round, pid)
                if self.deadline.steps(planned, pid) is None:
                    left_out[pid] = self.deadline.reason(planned, pid)
        return left_out

    def fit_config(self, server_round: int, partition_id: int) -> dict[str, int]:
        """The entries this client's fit config gets in this round: its K_i under unequal work or a deadline, else
        none."""
        if self.deadline.on:
            return {STEPS_KEY: self.deadline.steps(self._planned(server_round, partition_id), partition_id)}
        steps = self.planned_steps(server_round, partition_id)
        return {} if steps is None else {STEPS_KEY: steps}

    def cohort_figures(self, server_round: int, absent: Mapping[int, str]) -> dict[str, Any]:
        """The row's columns decided before sending: `unavailable` (clients that could not be sampled), `dropped`
        (drop-outs) and `late` (missed the deadline, policy 'drop'), each only when its model is on."""
        figures: dict[str, Any] = {}
        if self.availability is not None:
            figures["unavailable"] = self.availability.unavailable(server_round)
        if self.dropouts.on:
            figures["dropped"] = sum(reason == dropout.REASON for reason in absent.values())
        if self.deadline.drops:
            figures["late"] = sum(reason != dropout.REASON for reason in absent.values())
        return figures

    def round_figures(self, replies: Sequence[Reply]) -> dict[str, Any]:
        """The row's columns of the system model from the round's valid replies: the smallest, mean and largest
        K_i the clients took (`steps_min`, `steps_mean`, `steps_max`; None without replies), with unequal work or a
        deadline. Otherwise none."""
        if not (self.work.on or self.deadline.on):
            return {}
        steps = [r.steps for r in replies]
        if not steps:
            return {"steps_min": None, "steps_mean": None, "steps_max": None}
        return {"steps_min": min(steps), "steps_mean": sum(steps) / len(steps), "steps_max": max(steps)}

    def _planned(self, server_round: int, partition_id: int) -> int:
        steps = self.planned_steps(server_round, partition_id)
        return self.work.high if steps is None else steps
