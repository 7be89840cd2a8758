"""Drop-outs: each sampled client of a round fails with probability p (`dropout-rate`, docs/running/systems.md).

The server decides it before sending: a dropped client is counted in the cohort but receives no instruction and
does no work, as if its node had died before the round; the round records it as a failure. Its state is untouched,
which is what the acceptance ledger (fedsuite/state/store.py) restores after a real lost reply.
The draw of client i in round t is a pure function of (seed, t, i) on a stream no other draw of the run uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsuite.config.settings import Settings, setting

_STREAM = 0x44524F50  # "DROP"
REASON = "dropped by the system model (dropout-rate)"


@dataclass(frozen=True)
class Dropouts(Settings):
    """Drop-outs, typed settings (fedsuite/config/settings.py); without the keys, none.

    rate (dropout-rate): p, each sampled client's chance to drop out of a round.
    seed (seed): run seed.
    """

    rate: float = setting("dropout-rate")
    seed: int = setting("seed")

    @property
    def on(self) -> bool:
        return self.rate > 0

    def dropped(self, server_round: int, partition_id: int) -> bool:
        """Whether client `partition_id` drops out of `server_round` (never when off)."""
        if not self.on:
            return False
        return bool(np.random.default_rng([self.seed, server_round, partition_id, _STREAM]).random() < self.rate)
