"""Secure aggregation's rules on the server's side of a round, as a round stage (fedsuite/stages/server.py;
docs/privacy-secagg.md): every reply holds the cohort's mean, so a reply the server or an observer rejects is inside
the sum and cannot be taken out (the whole round is rejected), and no row figure is computed from single replies'
arrays (local consistency). The exchange itself is fedsuite/server/secure.py's (under Flower) or
fedsuite.run.inprocess's arithmetic (in process)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fedsuite.rules.rounds import Reply
from fedsuite.stages.server import ServerStage

log = logging.getLogger("flwr.fedsuite")


class SecureSum(ServerStage):
    @classmethod
    def of_run(cls, run_config: Mapping[str, Any]) -> SecureSum | None:
        """The run's stage when secagg=true, else None."""
        return cls() if run_config.get("secagg") is True else None

    def screen(self, server_round: int, replies: list[Reply], rejected: int) -> tuple[list[Reply], int]:
        if rejected and replies:  # the rejected upload is in the sum: nothing of it can be used
            log.warning("round %d: a rejected reply is inside the secure sum; the round's %d other replies are "
                        "rejected with it", server_round, len(replies))  # fmt: skip
            return [], rejected + len(replies)
        return replies, rejected

    def received(self, server_round: int, replies: Sequence[Reply]) -> dict[str, Any]:
        return {"local_consistency": None}  # every reply holds the mean
