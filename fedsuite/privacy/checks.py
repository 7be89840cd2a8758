"""One line for each run config that client-level DP cannot serve truthfully, before any training (docs/privacy.md,
Which options each algorithm allows). Run by fedsuite.config.run_config.resolve."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from fedsuite.privacy import accountant
from fedsuite.privacy.settings import ClientPrivacy, SampleLevelPrivacy


def expected_cohort(values: Mapping[str, Any]) -> float:
    """The clients a round expects: clients-per-round, or participation × num-clients with sampling='bernoulli'."""
    if values["sampling"] == "bernoulli":
        return float(values["participation"]) * int(values["num-clients"])
    return float(values["clients-per-round"])


def count_noise(values: Mapping[str, Any]) -> float:
    """σ_b of adaptive clipping: dp-count-noise, or the expected cohort / 20 when it is 0."""
    given = float(values["dp-count-noise"])
    return given if given > 0 else expected_cohort(values) / 20.0


@cache
def one_round_epsilon(sigma: float, sample: float, population: int, delta: float) -> float:
    """ε after one round of this kind (every process resolves the run config, each client message too: computed
    once per process)."""
    return accountant.RunAccountant(delta, {(sigma, sample, population): 1}).epsilon()


def budget_errors(values: Mapping[str, Any]) -> list[str]:
    """A target ε with no mechanism that spends a budget (dp='off' and dp-sgd=false): refused, as nothing would
    enforce it. The mechanisms that do spend one check the target themselves (below, and DP-SGD's clients)."""
    client = ClientPrivacy.from_values(values)
    target = client.target_epsilon
    if target > 0 and not client.on and not SampleLevelPrivacy.from_values(values).enabled:
        return [f"dp-target-epsilon={target:g}: no mechanism spends a privacy budget (dp='off', dp-sgd=false); set "
                "dp='server' or 'clients' (client-level DP) or dp-sgd=true (DP-SGD), or leave dp-target-epsilon at "
                "0"]  # fmt: skip
    return []


def privacy_errors(values: Mapping[str, Any], refusal: str = "") -> list[str]:
    """The problems of `values` (validated run-config values) under dp != 'off'; `refusal`: why the chosen algorithm
    cannot run under client-level DP ('' = it can)."""
    v = values
    if not ClientPrivacy.from_values(v).on:
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
    if v.get("sampling") == "bernoulli" and v["dp"] == "clients":
        errors.append(f"{mode} needs sampling='fixed': with Poisson sampling (bernoulli) the cohort size is "
                      "random, so the clients' noise shares cannot add up to σ·C; use dp='server' for Poisson "
                      "sampling")  # fmt: skip
    needed = ("dp-noise", "dp-count-noise", "dp-delta", "dp-target-epsilon", "clients-per-round", "num-clients",
              "sampling", "participation")  # fmt: skip
    if any(key not in v for key in needed):  # a key that failed its own check is reported already
        return errors
    sigma = float(v["dp-noise"])
    if v.get("dp-clip-mode") == "adaptive" and sigma > 0 and 2 * count_noise(v) <= sigma:
        errors.append(f"dp-count-noise={count_noise(v):g} (0 = clients-per-round / 20): must exceed dp-noise / 2 = "
                      f"{sigma / 2:g}, since the count of unclipped clients takes part of the noise budget; raise "
                      "dp-count-noise or lower dp-noise")  # fmt: skip
    target = float(v["dp-target-epsilon"])
    if target > 0 and not errors:
        if v["sampling"] == "bernoulli":
            event = (sigma, float(v["participation"]), accountant.POISSON)
            drawn = f"each of {v['num-clients']} clients with probability {v['participation']}"
        else:
            event = (sigma, int(v["clients-per-round"]), int(v["num-clients"]))
            drawn = f"{v['clients-per-round']} of {v['num-clients']} clients"
        epsilon = one_round_epsilon(*event, float(v["dp-delta"]))
        if epsilon > target:
            errors.append(f"dp-target-epsilon={target:g}: one round already spends ε={epsilon:.4g} at dp-delta="
                          f"{float(v['dp-delta']):g} (dp-noise={sigma:g}, {drawn}); raise dp-noise or the "
                          "target")  # fmt: skip
    return errors
