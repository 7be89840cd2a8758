"""Per-round cohorts of partition ids, a pure function of (seed, round) (ALGORITHMS.md §2.4).

Every algorithm run with the same seed and sampling settings sees the same cohort in every round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sampler:
    num_clients: int
    mode: str  # "fixed" (S without replacement) or "bernoulli" (each client with probability p)
    clients_per_round: int = 10
    participation: float = 0.1
    seed: int = 0

    def cohort(self, server_round: int) -> list[int]:
        if self.mode == "fixed":
            rng = np.random.default_rng([self.seed, server_round, 0])
            picked = rng.choice(self.num_clients, size=self.clients_per_round, replace=False)
            return sorted(int(i) for i in picked)
        if self.mode == "bernoulli":
            for attempt in range(10_000):  # an empty draw is redrawn (reference codes reseed per attempt)
                rng = np.random.default_rng([self.seed, server_round, 1 + attempt])
                picked = np.flatnonzero(rng.random(self.num_clients) < self.participation)
                if picked.size:
                    return [int(i) for i in picked]
            raise RuntimeError(f"participation={self.participation}: no client drawn in 10000 attempts")
        raise ValueError(f"sampling={self.mode!r}: allowed values are fixed, bernoulli")
