"""Stragglers under a round deadline (`client-speed`, `speed-spread`, `round-deadline`, `deadline-policy`;
docs/running/systems.md).

Client i has a speed s_i in (0, 1]: 1 for every client with client-speed='equal'; with 'uniform', drawn once per
client log-uniformly on [1/speed-spread, 1] from (seed, i), on a stream of its own. A round's deadline D is counted
in the local steps a speed-1 client completes, so client i can do floor(s_i·D) steps in a round. Against its
planned K_i (fedsuite/systems/work.py):
- partial: it takes max(1, min(K_i, floor(s_i·D))) steps, what fits and at least one;
- drop:    a client whose K_i does not fit is late: it gets no instruction and counts as a failure of the round.
D = 0: no deadline, nothing is decided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedsuite.config.settings import Settings, setting

SPEEDS = ("equal", "uniform")
POLICIES = ("partial", "drop")
_STREAM = 0x53504544  # "SPED"


@dataclass(frozen=True)
class Deadline(Settings):
    """The round deadline and the client speeds, typed settings (fedsuite/config/settings.py); without the keys, no
    deadline.

    deadline (round-deadline): D, in steps of a speed-1 client; 0 = none.
    policy (deadline-policy): 'partial' or 'drop'.
    speeds (client-speed): 'equal' or 'uniform'.
    spread (speed-spread): s >= 1, speeds on [1/s, 1].
    seed (seed): run seed.
    """

    deadline: int = setting("round-deadline")
    policy: str = setting("deadline-policy")
    speeds: str = setting("client-speed")
    spread: float = setting("speed-spread")
    seed: int = setting("seed")

    @property
    def on(self) -> bool:
        return self.deadline > 0

    @property
    def drops(self) -> bool:
        """Whether a late client is dropped (policy 'drop' under a deadline)."""
        return self.on and self.policy == "drop"

    def speed(self, partition_id: int) -> float:
        """s_i of client `partition_id`, the same in every round."""
        if self.speeds == "equal":
            return 1.0
        u = np.random.default_rng([self.seed, partition_id, _STREAM]).random()
        return float(self.spread ** (-u))

    def budget(self, partition_id: int) -> int:
        """floor(s_i·D): the steps client `partition_id` completes before the deadline."""
        return math.floor(self.speed(partition_id) * self.deadline)

    def steps(self, planned: int, partition_id: int) -> int | None:
        """The K_i client `partition_id` takes instead of its planned one; None when it is late (policy 'drop')."""
        if not self.on:
            return planned
        fits = self.budget(partition_id)
        if self.policy == "partial":
            return max(1, min(planned, fits))
        return planned if fits >= planned else None

    def reason(self, planned: int, partition_id: int) -> str:
        """Why a late client got no instruction, for clients.log."""
        speed, fits = self.speed(partition_id), self.budget(partition_id)
        return (f"late: its {planned} local steps do not fit round-deadline={self.deadline} at speed {speed:.3g} "
                f"({fits} fit; deadline-policy='drop')")  # fmt: skip
