"""FedNova (docs/algorithms/fednova.md): its aggregation against the paper's form in numpy, its reduction to FedAvg
under equal work, and its refusals. Its convergence on least squares with unequal K_i: tests/test_unequal_work.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.rules.server_rule import Reply, RuleSettings
from fedsuite.server.sampling import Sampler
from fedsuite.strategies.fednova import FedNova

UNEQUAL = {"local-work": "per-round", "local-steps-min": 1, "local-steps": 6}


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_one_aggregation_is_the_papers_update(weighting):
    """x^{t+1} = x^t − η_g τ_eff Σ p_i d_i, d_i = −Δ_i / a_i, τ_eff = Σ p_i a_i, written here from the paper."""
    rng = np.random.default_rng(0)
    dim, server_lr = 6, 0.7
    x0 = rng.normal(size=dim).astype(np.float32)
    steps, sizes = [3, 11, 1, 7], [20, 5, 40, 13]
    pairs = enumerate(zip(steps, sizes, strict=True))
    replies = [Reply(i, n, k, 0.1, {"delta": rng.normal(size=dim)}) for i, (k, n) in pairs]
    settings = RuleSettings(initial_x=x0, sampler=Sampler(4, "fixed", 4), lr=0.1, weighting=weighting)
    got = FedNova(settings, server_lr=server_lr).aggregate(1, replies)
    p = np.array(sizes, float) / sum(sizes) if weighting == "samples" else np.full(4, 0.25)
    tau = float(np.dot(p, steps))
    d = [-r.arrays["delta"] / r.steps for r in replies]
    expected = x0 - server_lr * tau * sum(pi * di for pi, di in zip(p, d, strict=True))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_equal_work_is_fedavg_bit_for_bit(weighting):
    kit.check_reduction("fednova", "fedavg", {"weighting": weighting, "server-lr": 0.8})


def test_unequal_work_makes_it_differ_from_fedavg():
    base = {**kit.PARTIAL, **UNEQUAL}
    nova, avg = kit.run_algorithm("fednova", base), kit.run_algorithm("fedavg", base)
    assert not kit.identical(nova.x, avg.x)


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"agg-scale": "1/N"}, "agg-scale='1/N': defined for"),
        ({"secagg": True, "client-mapping": "fixed", **UNEQUAL},
         "secagg=true with local-work='uniform' or 'per-round': the server weighs each Δ_i by its own step count K_i"),
        ({"secagg": True, "client-mapping": "fixed", "local-steps": 0}, "secagg=true with local-steps=0"),
    ],
)  # fmt: skip
def test_what_fednova_does_not_define_is_refused_in_one_line(keys, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve({"algorithm": "fednova", **keys})
