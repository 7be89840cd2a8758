"""One line for each run config that client-level DP cannot serve truthfully, before any training (docs/privacy.md,
Which options each algorithm allows). Run by fedsuite.config.resolve."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedsuite.privacy import accountant


def count_noise(values: Mapping[str, Any]) -> float:
    """σ_b of adaptive clipping: dp-count-noise, or clients-per-round / 20 when it is 0."""
    given = float(values["dp-count-noise"])
    return given if given > 0 else int(values["clients-per-round"]) / 20.0


def privacy_errors(values: Mapping[str, Any], refusal: str = "") -> list[str]:
    """The problems of `values` (validated run-config values) under dp != 'off'; `refusal`: why the chosen algorithm
    cannot run under client-level DP ('' = it can)."""
    v = values
    if v.get("dp", "off") == "off":
        return []
    mode = f"dp={v['dp']!r}"
    errors = []
    if not accountant.available():
        errors.append(f"{mode}: the privacy accountant is missing: {accountant.INSTALL}")
    if refusal:
        errors.append(f"{mode}: algorithm={v['algorithm']!r} {refusal}")
    if v.get("weighting") == "samples":
        errors.append(f"{mode} needs weighting='uniform': weighting by sample counts gives one client's upload a "
                      "weight the clip does not bound")  # fmt: skip
    if v.get("local-steps") == 0:
        errors.append(f"{mode} needs local-steps > 0: in epoch mode a reply's step count reveals the client's data "
                      "size, which the noise does not cover")  # fmt: skip
    if v.get("sampling") == "bernoulli":
        errors.append(f"{mode} is accounted for fixed-size cohorts: use sampling='fixed' (Poisson sampling needs "
                      "the noise on empty cohorts and a fixed denominator, not built yet)")  # fmt: skip
    needed = ("dp-noise", "dp-count-noise", "dp-delta", "dp-target-epsilon", "clients-per-round", "num-clients")
    if any(key not in v for key in needed):  # a key that failed its own check is reported already
        return errors
    sigma = float(v["dp-noise"])
    if v.get("dp-clip-mode") == "adaptive" and sigma > 0 and 2 * count_noise(v) <= sigma:
        errors.append(f"dp-count-noise={count_noise(v):g} (0 = clients-per-round / 20): must exceed dp-noise / 2 = "
                      f"{sigma / 2:g}, since the count of unclipped clients takes part of the noise budget; raise "
                      "dp-count-noise or lower dp-noise")  # fmt: skip
    target = float(v["dp-target-epsilon"])
    if target > 0 and not errors:
        first = accountant.RunAccountant(float(v["dp-delta"]))
        first.add(sigma, int(v["clients-per-round"]), int(v["num-clients"]))
        epsilon = first.epsilon()
        if epsilon > target:
            errors.append(f"dp-target-epsilon={target:g}: one round already spends ε={epsilon:.4g} at dp-delta="
                          f"{float(v['dp-delta']):g} (dp-noise={sigma:g}, {v['clients-per-round']} of "
                          f"{v['num-clients']} clients); raise dp-noise or the target")  # fmt: skip
    return errors
