"""The system models as a round stage (fedsuite/stages/server.py): the clients that drop out or miss the deadline
get no instruction, each client's K_i travels in its fit config, and the row gets the models' figures
(docs/running/systems.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedsuite.rules.rounds import Reply
from fedsuite.stages.server import ServerStage
from fedsuite.systems.model import SystemModel


class SystemsStage(ServerStage):
    def __init__(self, model: SystemModel):
        self.model = model

    @classmethod
    def of_run(cls, run_config: Mapping[str, Any]) -> SystemsStage | None:
        """The run's stage, or None when its system models decide nothing (the rows are then as without them)."""
        model = SystemModel.from_run_config(run_config)
        return cls(model) if model.on else None

    def absent(self, server_round: int, cohort: Sequence[int]) -> dict[int, str]:
        return self.model.absent(server_round, cohort)

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        return self.model.fit_config(server_round, partition_id)

    def sent(self, server_round: int, absent: Mapping[int, str]) -> dict[str, Any]:
        return self.model.cohort_figures(server_round, absent)

    def received(self, server_round: int, replies: Sequence[Reply]) -> dict[str, Any]:
        return self.model.round_figures(replies)
