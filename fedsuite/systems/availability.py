"""Client availability: which clients can be sampled in a round (`availability`, docs/running/systems.md).

- always: every client, every round (the sampler draws as without this model);
- markov: each client is on or off; off → on with probability `availability-p-on` and on → off with
          `availability-p-off` per round, starting in round 1 from the chain's stationary distribution
          (on with probability p_on / (p_on + p_off)); client i's draw in round t is entry i of a vector drawn from
          (seed, t), so its chain is the same whatever else the run does;
- cycle:  every `availability-period` rounds, each client is available for ⌈fraction·period⌉ consecutive rounds
          (`availability-fraction`), from a phase drawn once per client from the seed.
The sampler (fedsuite/server/sampling.py) draws each round's cohort from the available clients only. Everything is a
pure function of the seed and the round, so every engine, every algorithm and a resumed run see the same clients.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from fedsuite.config.settings import Settings, setting

MODES = ("always", "markov", "cycle")
_STREAM = 0x41564149  # "AVAI"
_CHAINS: dict[Availability, tuple[int, np.ndarray]] = {}  # model → (round, states) last computed in this process
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Availability(Settings):
    """Client availability, typed settings (fedsuite/config/settings.py).

    mode (availability): 'always', 'markov' or 'cycle'.
    num_clients (num-clients): N.
    p_off (availability-p-off): markov: an available client's chance to go off the next round.
    p_on (availability-p-on): markov: an unavailable client's chance to come back the next round.
    period (availability-period): cycle: the cycle's length in rounds.
    fraction (availability-fraction): cycle: the share of each period a client is available.
    seed (seed): run seed.
    """

    mode: str = setting("availability")
    num_clients: int = setting("num-clients")
    p_off: float = setting("availability-p-off")
    p_on: float = setting("availability-p-on")
    period: int = setting("availability-period")
    fraction: float = setting("availability-fraction")
    seed: int = setting("seed")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Availability | None:
        """The model of a resolved run config (or its dict); None with availability='always' (or without the key)."""
        model = super().from_values(values)
        return None if model.mode == "always" else model

    def mask(self, server_round: int) -> np.ndarray:
        """Which clients are available in `server_round` (bool, one per client)."""
        if self.mode == "cycle":
            return self._cycle(server_round)
        if self.mode == "markov":
            with _LOCK:
                last, states = _CHAINS.get(self, (0, None))
                if last > server_round:  # asked about an earlier round: walk the chain again from round 1
                    last, states = 0, None
                for t in range(last + 1, server_round + 1):
                    states = self._markov_step(states, t)
                _CHAINS[self] = (server_round, states)
                return states.copy()
        raise ValueError(f"availability={self.mode!r}: allowed values are {', '.join(MODES)}")

    def clients(self, server_round: int) -> np.ndarray:
        """The available partition ids of `server_round`, ascending."""
        return np.flatnonzero(self.mask(server_round))

    def unavailable(self, server_round: int) -> int:
        return int(self.num_clients - np.count_nonzero(self.mask(server_round)))

    def first_empty_round(self, rounds: int) -> int | None:
        """The first of rounds 1..`rounds` in which no client is available, or None."""
        return _first_empty_round(self, rounds)

    def _markov_step(self, states: np.ndarray | None, server_round: int) -> np.ndarray:
        u = np.random.default_rng([self.seed, server_round, _STREAM]).random(self.num_clients)
        if states is None:  # round 1: the stationary distribution
            return u < self.p_on / (self.p_on + self.p_off)
        return np.where(states, u >= self.p_off, u < self.p_on)

    def _cycle(self, server_round: int) -> np.ndarray:
        phases = np.random.default_rng([self.seed, _STREAM]).integers(0, self.period, self.num_clients)
        return (server_round - 1 + phases) % self.period < math.ceil(self.fraction * self.period)


@cache
def _first_empty_round(model: Availability, rounds: int) -> int | None:
    """(cached: every process resolves the run config, each client message too)"""
    if model.mode == "cycle":  # periodic: its first period tells
        return next((t for t in range(1, min(rounds, model.period) + 1) if not model._cycle(t).any()), None)
    states = None
    for t in range(1, rounds + 1):
        states = model._markov_step(states, t)
        if not states.any():
            return t
    return None
