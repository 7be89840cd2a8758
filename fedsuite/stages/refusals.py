"""Each round-stage mechanism's check of a run config, and the chosen algorithm's refusal of it, in one list.

A mechanism that an algorithm may be unable to run under (client-level DP, DP-SGD, secure aggregation, compressed
uploads) checks the
run config with its own function, given the algorithm's refusal of it: the registry entry's `refuses`, keyed by the
mechanism's run-config key ('' = it can). `fedsuite.registry.known.algorithm_errors` runs every check here, so a new
mechanism adds its check in one line below and an algorithm refuses it in its entry, with no field of its own
(docs/developer/architecture.md#round-stages, docs/own/algorithm.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedsuite.privacy.checks import budget_errors, privacy_errors
from fedsuite.privacy.dp_sgd_checks import config_errors as dp_sgd_errors
from fedsuite.privacy.secagg import secagg_errors
from fedsuite.stages.compression_checks import compression_errors

Check = Callable[[Mapping[str, Any], str], list[str]]

# mechanism's run-config key (None: it takes no refusal) -> its check of validated run-config values
MECHANISM_CHECKS: tuple[tuple[str | None, Check], ...] = (
    ("dp", privacy_errors),
    ("dp-sgd", dp_sgd_errors),
    (None, lambda values, _refusal: budget_errors(values)),
    ("secagg", secagg_errors),
    ("compress-up", compression_errors),
)
MECHANISMS = tuple(key for key, _ in MECHANISM_CHECKS if key is not None)


def mechanism_errors(values: Mapping[str, Any], algorithm) -> list[str]:
    """The problems of `values` under every mechanism they switch on, with `algorithm`'s (a registry entry's)
    refusals; a refusal that names no mechanism is one too."""
    errors = [f"algorithm={algorithm.name!r} refuses {key!r}, which is no mechanism's key: allowed are "
              f"{', '.join(MECHANISMS)}" for key in algorithm.refuses if key not in MECHANISMS]  # fmt: skip
    for key, check in MECHANISM_CHECKS:
        errors += check(values, algorithm.refusal(key) if key else "")
    return errors
