"""What one algorithm is to the suite: a registry entry (`Algorithm`) naming its server rule and client half as
"module:Class", which run-config keys feed which constructor argument, the keys it adds to the schema, its own
config checks and what a tuning searches.

Built-ins (fedsuite/registry/builtin.py) and plug-ins are entries of the same kind; fedsuite/registry/known.py holds
them. Only the schema is imported here, so reading entries stays light (no torch, no Flower).
"""

from __future__ import annotations

import warnings
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
    # the round-stage mechanisms this algorithm cannot run under: a mechanism's run-config key (dp, dp-sgd, secagg,
    # compress-up)
    # -> why, in one line; each mechanism's config check reads its own entry (fedsuite/stages/refusals.py)
    refuses: Mapping[str, str] = field(default_factory=dict)
    # deprecated for one release, read into `refuses`: dp_refusal (key dp), dp_sgd_refusal (dp-sgd), secagg_refusal
    # (secagg)
    dp_refusal: str = ""
    dp_sgd_refusal: str = ""
    secagg_refusal: str = ""
    keys: tuple[Key, ...] = ()  # run-config keys the algorithm adds to the schema (its hyper-parameters)
    # common run-config keys whose default differs for this algorithm (FedPAQ: compress-up='qsgd'); a run that gives
    # the key a value other than the schema's default keeps its own
    key_defaults: Mapping[str, Any] = field(default_factory=dict)
    # what simulation.tune searches: run-config key -> LogRange or a tuple of values (fedsuite.config.tunable); every
    # algorithm declares at least `lr`, and every value lies inside its key's schema range
    tunable: Mapping[str, Search] = field(default_factory=dict)

    def __post_init__(self):
        refuses = dict(self.refuses)
        for name, key in _OLD_REFUSAL_FIELDS.items():
            if (reason := getattr(self, name)) and self.refuses.get(key) != reason:  # given the old way
                warnings.warn(f"Algorithm {self.name!r}: {name}= is deprecated, give refuses={{{key!r}: ...}}",
                              DeprecationWarning, stacklevel=3)  # fmt: skip
                refuses.setdefault(key, reason)
            object.__setattr__(self, name, refuses.get(key, ""))  # the old field reads the same for one release
        object.__setattr__(self, "refuses", refuses)

    def refusal(self, mechanism: str) -> str:
        """Why this algorithm cannot run under the mechanism with run-config key `mechanism`; '' = it can."""
        return self.refuses.get(mechanism, "")


_OLD_REFUSAL_FIELDS = {"dp_refusal": "dp", "dp_sgd_refusal": "dp-sgd", "secagg_refusal": "secagg"}
