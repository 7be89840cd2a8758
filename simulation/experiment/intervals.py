"""95 % intervals over seeds and paired differences against a baseline (docs/running/compare-and-sweep.md).

The interval of a mean over n ≥ 2 values is Student's t interval, mean ± t_{0.975, n−1} · s/√n with s the sample
standard deviation; one value has none. A paired difference is the mean over the seeds both runs completed of
(algorithm − baseline), with the same t interval over those differences; its verdict is "better" or "worse" when
the interval leaves out 0 and "not distinguishable" when it holds 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# t_{0.975, df} for df = 1 … 30 (six decimals); beyond, the Cornish–Fisher expansion below (within 1e-7 there)
# fmt: off
T_975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
# fmt: on
Z_975 = 1.959963984540054  # the normal quantile the t quantile tends to

BETTER, WORSE, TIED = "better", "worse", "not distinguishable"


def t_quantile(df: int) -> float:
    """t_{0.975, df}, the two-sided 95 % quantile of Student's t with df ≥ 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df}: give at least 1")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975  # the expansion of the t quantile in powers of 1/df (Abramowitz & Stegun 26.7.5)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """The mean of n values and the half-width of its 95 % t interval (None for one value: no interval)."""

    mean: float
    half: float | None
    n: int

    @property
    def low(self) -> float | None:
        return None if self.half is None else self.mean - self.half

    @property
    def high(self) -> float | None:
        return None if self.half is None else self.mean + self.half


def t_interval(values: Sequence[float]) -> Interval | None:
    """The mean of `values` with its 95 % t interval; no interval for one value, None for none."""
    n = len(values)
    if n == 0:
        return None
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, None, 1)
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Interval(mean, t_quantile(n - 1) * s / math.sqrt(n), n)


def paired(base: Mapping[int, float | None], other: Mapping[int, float | None]) -> Interval | None:
    """other − base over the seeds both hold a value for (None where they share none)."""
    return t_interval([other[s] - base[s] for s in sorted(base.keys() & other.keys())
                       if base[s] is not None and other[s] is not None])  # fmt: skip


def verdict(diff: Interval | None, higher_is_better: bool = True) -> str:
    """better / worse when the interval of the difference leaves out 0, not distinguishable when it holds 0;
    "" without an interval (one pair or none)."""
    if diff is None or diff.half is None:
        return ""
    if diff.low > 0 or diff.high < 0:
        return BETTER if (diff.low > 0) == higher_is_better else WORSE
    return TIED


def format_interval(value: Interval | None, spec: str) -> str:
    """`0.8110 [0.7996, 0.8224]` (the mean and its 95 % interval), `0.8110 (n = 1)`, or `–` for nothing."""
    if value is None:
        return "–"
    if value.half is None:
        return f"{value.mean:{spec}} (n = 1)"
    return f"{value.mean:{spec}} [{value.low:{spec}}, {value.high:{spec}}]"


def format_difference(diff: Interval | None, spec: str, higher_is_better: bool = True) -> str:
    """`+0.0285 [+0.0216, +0.0354] better`: the signed mean difference, its 95 % interval and the verdict."""
    if diff is None:
        return "–"
    if diff.half is None:
        return f"{diff.mean:+{spec}} (n = 1)"
    return f"{diff.mean:+{spec}} [{diff.low:+{spec}}, {diff.high:+{spec}}] {verdict(diff, higher_is_better)}"
