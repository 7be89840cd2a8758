"""The privacy budget ε(δ) of a run, computed by Google's `dp-accounting` library (its Rényi-DP accountant); nothing
here derives a bound by hand (docs/privacy.md, How ε is computed).

A round of client-level DP is one subsampled Gaussian mechanism: a cohort of `sample` clients drawn without
replacement from `population`, each contribution clipped to C, Gaussian noise of std σ·C on the sum (a step of
DP-SGD is the same mechanism over a client's records: a batch of B of its n records). Fixed-size
cohorts make the population size public, so the neighbouring relation is replace-one, under which one client's
contribution moves the sum by up to 2C: the library is given the noise multiplier σ/2 relative to that sensitivity.

With Poisson sampling (each client in the cohort independently with probability q) the number of clients is not
fixed, so neighbouring federations differ by adding or removing one client, whose clipped contribution moves the sum
by up to C: the library gets σ itself, and its amplification by subsampling for the Poisson-sampled Gaussian.

Rounds that carried the same noise are the same event; the library's Rényi divergences of each distinct event are
computed once and summed with their counts, then converted to ε at the run's δ by the library's conversion.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from functools import cache

import numpy as np

INSTALL = "pip install 'fedsuite[privacy]' (the dp-accounting library)"
POISSON = 0  # an event's population 0: Poisson sampling, its `sample` the probability q (docs/privacy.md)
REPLACE_ONE_SENSITIVITY = 2.0  # one client's clipped contribution (norm ≤ C) replaced by another moves the sum ≤ 2C


def available() -> bool:
    """Whether the library is installed (the `privacy` extra); it is imported only when a run accounts (it takes
    most of a second to import)."""
    return importlib.util.find_spec("dp_accounting") is not None


def _library():
    if not available():
        raise RuntimeError(f"privacy accounting needs the dp-accounting library: {INSTALL}")
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    return dp_accounting, rdp_privacy_accountant


def round_event(noise_multiplier: float, sample: float, population: int):
    """One round: `sample` of `population` clients without replacement (replace-one neighbours), or with population
    POISSON each client with probability `sample` (add-or-remove neighbours); the Gaussian mechanism with noise std
    noise_multiplier·C on the sum of contributions clipped to C."""
    dp_accounting, _ = _library()
    if population == POISSON:
        return dp_accounting.PoissonSampledDpEvent(sample, dp_accounting.GaussianDpEvent(noise_multiplier))
    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / REPLACE_ONE_SENSITIVITY)
    return dp_accounting.SampledWithoutReplacementDpEvent(population, int(sample), gaussian)


Event = tuple[float, float, int]  # (noise multiplier, cohort size or Poisson probability, population or POISSON)


def _key(noise_multiplier: float, sample: float, population: int) -> Event:
    population = int(population)
    return float(noise_multiplier), float(sample) if population == POISSON else int(sample), population


class RunAccountant:
    """ε(δ) of the rounds so far. `rounds` maps each kind of round, (noise multiplier, cohort, population) or
    (noise multiplier, q, POISSON), to how many rounds ran with it; it is the accountant's whole state (checkpoints
    keep it). One accountant holds one kind of sampling: the two use different neighbouring relations."""

    def __init__(self, delta: float, rounds: Mapping[Event, int] | None = None):
        self.delta = delta
        self.rounds: dict[Event, int] = {}
        self._orders: np.ndarray | None = None
        for key, count in (rounds or {}).items():
            self.add(*key, count=count)

    def add(self, noise_multiplier: float, sample: float, population: int, count: int = 1) -> None:
        key = _key(noise_multiplier, sample, population)
        if self.rounds and (next(iter(self.rounds))[2] == POISSON) != (key[2] == POISSON):
            raise ValueError("one accountant holds rounds of one kind of sampling (Poisson or fixed-size)")
        self.rounds[key] = self.rounds.get(key, 0) + count

    def epsilon(self, extra: Mapping[Event, int] | None = None) -> float:
        """ε at the run's δ for the rounds so far (plus `extra` rounds not yet run); inf when a round carried no
        noise, 0 before any round."""
        rounds = dict(self.rounds)
        for key, count in (extra or {}).items():
            key = _key(*key)
            rounds[key] = rounds.get(key, 0) + count
        if not rounds:
            return 0.0
        if any(sigma <= 0 for sigma, _, _ in rounds):
            return math.inf
        total = sum(count * self._event_rdp(key) for key, count in rounds.items())
        epsilon, _ = _library()[1].compute_epsilon(self._orders, total, self.delta)
        return float(epsilon)

    def rounds_within(self, target: float, noise_multiplier: float, sample: float, population: int, limit: int) -> int:
        """How many more rounds of this kind fit in ε ≤ target (at most `limit`), by bisection on the library's ε."""
        key = _key(noise_multiplier, sample, population)
        low, high = 0, limit
        while low < high:
            mid = (low + high + 1) // 2
            if self.epsilon({key: mid}) <= target:
                low = mid
            else:
                high = mid - 1
        return low

    def state(self) -> list[list[float]]:
        """The rounds as [noise multiplier, cohort or q, population or POISSON, count] rows (checkpoint-friendly)."""
        return [[*key, count] for key, count in sorted(self.rounds.items())]

    @classmethod
    def from_state(cls, delta: float, rows) -> RunAccountant:
        return cls(delta, {(s, m, n): int(c) for s, m, n, c in rows})

    def _event_rdp(self, key: Event) -> np.ndarray:
        rdp, self._orders = _event_rdp(key)
        return rdp


@cache
def _event_rdp(key: Event) -> tuple[np.ndarray, np.ndarray]:
    """The library's Rényi divergences of one round of this kind at its default orders, and the orders: computed once
    per process (a fixed-size cohort's take a noticeable fraction of a second), shared by every accountant."""
    dp_accounting, rdp = _library()
    relation = dp_accounting.NeighboringRelation
    neighbours = relation.ADD_OR_REMOVE_ONE if key[2] == POISSON else relation.REPLACE_ONE
    accountant = rdp.RdpAccountant(neighboring_relation=neighbours)
    accountant.compose(round_event(*key))
    return accountant.rdp, accountant.orders
