"""Unequal local work: each client's number of local steps K_i in a round (`local-work`, docs/running/systems.md).

- equal:     every client takes the run's K (`local-steps`), or E·⌈n_i/B⌉ in epoch mode (local-steps=0); nothing is
             decided here and nothing is sent;
- uniform:   K_i is drawn once per client, uniformly on the integers [local-steps-min, local-steps], from
             (seed, partition): the same K_i in every round;
- per-round: K_i is drawn again in every round from (seed, round, partition).
The draws are pure functions of the run seed, so a resumed run, every engine and every algorithm see the same K_i.
No numpy generator of the suite draws from these streams (cohorts use [seed, round, 0 | 1 + attempt]; the
minibatches a torch generator seeded by (seed, round, partition)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsuite.config.settings import Settings, setting

MODES = ("equal", "uniform", "per-round")
_STREAM = 0x574F524B  # "WORK": the K_i draws' stream, apart from every other draw of the run


@dataclass(frozen=True)
class LocalWork(Settings):
    """The local-work plan, typed settings (fedsuite/config/settings.py): `LocalWork.from_values(values)` reads a
    resolved run config (or its dict); a config without the keys is equal work (the schema's defaults).

    mode (local-work): 'equal', 'uniform' or 'per-round'.
    low (local-steps-min): K_min, the smallest K_i drawn.
    high (local-steps): K_max, the largest K_i drawn (the run's K under equal work).
    seed (seed): run seed.
    """

    mode: str = setting("local-work")
    low: int = setting("local-steps-min")
    high: int = setting("local-steps")
    seed: int = setting("seed")

    @property
    def on(self) -> bool:
        return self.mode != "equal"

    def steps(self, server_round: int, partition_id: int) -> int | None:
        """K_i of client `partition_id` in `server_round`; None under equal work (the client uses local-steps)."""
        if self.mode == "equal":
            return None
        if self.mode == "uniform":
            entropy = [self.seed, partition_id, _STREAM]
        elif self.mode == "per-round":
            entropy = [self.seed, server_round, partition_id, _STREAM]
        else:
            raise ValueError(f"local-work={self.mode!r}: allowed values are {', '.join(MODES)}")
        return int(np.random.default_rng(entropy).integers(self.low, self.high, endpoint=True))
