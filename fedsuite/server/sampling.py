"""Per-round cohorts of partition ids, a pure function of (seed, round) (docs/reference/protocol.md, Client sampling).

Every algorithm run with the same seed and sampling settings sees the same cohort in every round, and the same
tracking subset Y^t ⊆ S^t (FAdamET/FAdamGT, docs/algorithms/fadamet.md), which depends on (seed, round, cohort) only.
Under a client-availability model (fedsuite/systems/availability.py, docs/running/systems.md) the cohort is drawn
from the round's available clients only; without one (availability='always') the draws are exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsuite.systems.availability import Availability


@dataclass(frozen=True)
class Sampler:
    num_clients: int
    mode: str  # "fixed" (S without replacement) or "bernoulli" (each client with probability p)
    clients_per_round: int = 10
    participation: float = 0.1
    seed: int = 0
    # bernoulli: an empty draw is drawn again (the papers' codes), except under client-level DP, whose accounting
    # assumes true Poisson sampling: there an empty cohort is a round of noise only (docs/privacy.md)
    redraw_empty: bool = True
    availability: Availability | None = None  # None: every client can be drawn in every round

    @classmethod
    def from_settings(
        cls, sampling: Any, redraw_empty: bool = True, availability: Availability | None = None
    ) -> Sampler:
        """The sampler of a run config's sampling settings (`Sampler.from_settings(cfg.sampling)`, a
        fedsuite.config.run_config.ClientSampling)."""
        s = sampling
        return cls(s.num_clients, s.mode, s.clients_per_round, s.participation, s.seed, redraw_empty, availability)

    @classmethod
    def of_run(cls, cfg: Any) -> Sampler:
        """The sampler of a resolved run config (a fedsuite.config.run_config.Config): its sampling settings, and true
        Poisson sampling when the run uses client-level DP, and the run's client availability. Server and clients
        (DP-SGD's ledger) build it here."""
        return cls.from_settings(
            cfg.sampling, redraw_empty=not cfg.privacy.on, availability=Availability.from_values(cfg)
        )

    def cohort(self, server_round: int) -> list[int]:
        """The round's cohort, ascending: S of the clients without replacement (fixed; under an availability
        model min(S, available) of the available ones), or each client with probability p (bernoulli; only
        available ones are kept, each with its own coin, drawn as without the model)."""
        mask = None if self.availability is None else self.availability.mask(server_round)
        if self.mode == "fixed":
            rng = np.random.default_rng([self.seed, server_round, 0])
            if mask is None:
                picked = rng.choice(self.num_clients, size=self.clients_per_round, replace=False)
            else:
                available = np.flatnonzero(mask)
                picked = available[
                    rng.choice(len(available), size=min(self.clients_per_round, len(available)), replace=False)
                ]
            return sorted(int(i) for i in picked)
        if self.mode == "bernoulli":
            for attempt in range(10_000):  # an empty draw is redrawn (reference codes reseed per attempt)
                rng = np.random.default_rng([self.seed, server_round, 1 + attempt])
                drawn = rng.random(self.num_clients) < self.participation
                if mask is not None:
                    drawn &= mask
                picked = np.flatnonzero(drawn)
                if picked.size or not self.redraw_empty:
                    return [int(i) for i in picked]
            raise RuntimeError(f"participation={self.participation}: no client drawn in 10000 attempts")
        raise ValueError(f"sampling={self.mode!r}: allowed values are fixed, bernoulli")

    def tracking(self, server_round: int, cohort: Sequence[int], size: int = 0) -> list[int]:
        """Y^t ⊆ S^t, the clients that refresh their tracking terms: `size` of them (at most |S^t|),
        or with size 0 half of the realised cohort, at least 1. Drawn from (seed, round) on a stream of its own,
        so it is the same for every algorithm that sees this cohort."""
        if not cohort:
            return []
        k = max(1, len(cohort) // 2) if size <= 0 else min(size, len(cohort))
        rng = np.random.default_rng([self.seed, server_round, 0, 1])  # cohorts use [seed, round, 0 | 1 + attempt]
        return sorted(int(cohort[j]) for j in rng.choice(len(cohort), size=k, replace=False))
