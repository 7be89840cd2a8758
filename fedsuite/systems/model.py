"""`SystemModel`: the one place the server decides what each sampled client does in a round (docs/running/systems.md).

Built once per run from its resolved config (the seed included); the strategy asks it, per round and client, for
the entries of that client's fit config (`fit_config`), and adds what it returns from `round_figures` to the
round's row. Today it holds the local-work plan (fedsuite/systems/work.py); later system models (deadlines,
drop-outs, availability) belong beside it here, so the strategy keeps asking one object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsuite.rounds import Reply
from fedsuite.systems.work import STEPS_KEY, LocalWork


@dataclass(frozen=True)
class SystemModel:
    work: LocalWork = field(default_factory=LocalWork)

    @classmethod
    def from_run_config(cls, values: Mapping[str, Any]) -> SystemModel:
        """The model of a resolved run config (a fedsuite.config.Config or its dict); a config without the system
        keys (e.g. a plan built by hand) is the model that decides nothing."""
        return cls(work=LocalWork.from_values(values))

    @property
    def on(self) -> bool:
        """Whether it decides anything: off, no fit config entry and no row column is added."""
        return self.work.on

    def fit_config(self, server_round: int, partition_id: int) -> dict[str, int]:
        """The entries this client's fit config gets in this round: its K_i under unequal work, else none."""
        steps = self.work.steps(server_round, partition_id)
        return {} if steps is None else {STEPS_KEY: steps}

    def round_figures(self, replies: Sequence[Reply]) -> dict[str, Any]:
        """The row's columns of the system model from the round's valid replies: the smallest, mean and largest
        K_i the clients took (`steps_min`, `steps_mean`, `steps_max`; None without replies). Off: none."""
        if not self.on:
            return {}
        steps = [r.steps for r in replies]
        if not steps:
            return {"steps_min": None, "steps_mean": None, "steps_max": None}
        return {"steps_min": min(steps), "steps_mean": sum(steps) / len(steps), "steps_max": max(steps)}
