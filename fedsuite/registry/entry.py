"""What one algorithm is to the suite: a registry entry (`Algorithm`) naming its server rule and client half as
"module:Class", which run-config keys feed which constructor argument, the keys it adds to the schema, its own
config checks and what a tuning searches.

Built-ins (fedsuite/registry/builtin.py) and plug-ins are entries of the same kind; fedsuite/registry/known.py holds
them. Only the schema is imported here, so reading entries stays light (no torch, no Flower).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fedsuite.config.schema import Key
from fedsuite.config.tunable import Search


@dataclass(frozen=True)
class Algorithm:
    name: str
    strategy: str  # the server rule, "module:Class"
    client: str
    section: str  # where it is described: its page docs/algorithms/<name>.md (a plug-in: its own reference)
    summary: str
    strategy_args: dict[str, str] = field(default_factory=dict)  # constructor kwarg -> run-config key
    client_args: dict[str, str] = field(default_factory=dict)
    # agg-scale='1/N' (the LoSAC paper's eq. (13), Σ_S Δ_i / N) is defined for the algorithms of that suite, whose
    # server moves x by η_g·(aggregate of Δ_i), so that a comparison uses it for all of them (docs/algorithms/losac.md)
    sum_scale: bool = False
    checks: tuple[Callable[[Mapping[str, Any]], str | None], ...] = ()  # the algorithm's own config rules
    # why client-level DP (run-config key dp) cannot cover what this algorithm uploads; '' = it can (docs/privacy.md)
    dp_refusal: str = ""
    # why DP-SGD (run-config key dp-sgd) cannot account for this algorithm: its clients release gradients of their
    # records outside the private local steps, or train on fixed blocks; '' = it can (docs/privacy-dp-sgd.md)
    dp_sgd_refusal: str = ""
    # why secure aggregation (run-config key secagg) cannot serve this algorithm: its server needs more than the
    # cohort's sums of the uploads; '' = it can (docs/privacy-secagg.md). Config-dependent refusals are `checks`.
    secagg_refusal: str = ""
    keys: tuple[Key, ...] = ()  # run-config keys the algorithm adds to the schema (its hyper-parameters)
    # what simulation.tune searches: run-config key -> LogRange or a tuple of values (fedsuite.config.tunable); every
    # algorithm declares at least `lr`, and every value lies inside its key's schema range
    tunable: Mapping[str, Search] = field(default_factory=dict)
