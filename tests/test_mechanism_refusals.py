"""An algorithm's refusals of round-stage mechanisms are read by the mechanisms' own checks
(fedsuite/stages/refusals.py) from one field of its registry entry, `refuses`, keyed by the mechanism's run-config
key; the per-mechanism fields of earlier releases still refuse, with a DeprecationWarning, for one release."""

from __future__ import annotations

import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.registry import known as registry
from fedsuite.registry.entry import Algorithm
from fedsuite.registry.plugins import AlgorithmRegistry
from fedsuite.stages.refusals import MECHANISMS

SECAGG = {"secagg": True, "client-mapping": "fixed", "num-clients": 4, "clients-per-round": 4,
          "dataset": "synthetic-lsq", "secagg-shares": 3, "secagg-threshold": 2}  # fmt: skip
DP = {
    "dp": "server",
    "dp-noise": 1.0,
    "local-steps": 2,
    "dataset": "synthetic-lsq",
    "num-clients": 4,
    "clients-per-round": 4,
}


def entry(name: str, **refusing) -> Algorithm:
    fedavg = registry.ALGORITHMS["fedavg"]
    return Algorithm(name=name, strategy=fedavg.strategy, client=fedavg.client, section="plug-in (test)",
                     summary="FedAvg", **refusing)  # fmt: skip


@pytest.fixture
def plugged(monkeypatch):
    algorithms = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=list)
    monkeypatch.setattr(registry, "ALGORITHMS", algorithms)
    return algorithms


def test_every_built_in_refusal_names_a_mechanism():
    assert MECHANISMS == ("dp", "dp-sgd", "secagg", "compress-up")
    named = {key for algo in registry.ALGORITHMS.values() for key in algo.refuses}
    assert named and named <= set(MECHANISMS)
    assert registry.ALGORITHMS["mimesvrg"].refusal("secagg") and not registry.ALGORITHMS["fedavg"].refuses


def test_a_refusal_stops_only_its_own_mechanism(plugged):
    plugged.register(entry("no-secagg", refuses={"secagg": "needs each client's vector"}))
    with pytest.raises(ConfigError, match="secagg=true: algorithm='no-secagg' needs each client's vector"):
        resolve({**SECAGG, "algorithm": "no-secagg"})
    assert resolve({**DP, "algorithm": "no-secagg"}).algorithm == "no-secagg"  # DP is not refused
    assert resolve({**SECAGG, "algorithm": "fedavg"}).algorithm == "fedavg"


def test_a_refusal_of_no_mechanism_is_named(plugged):
    plugged.register(entry("odd", refuses={"compression": "why not"}))
    with pytest.raises(
        ConfigError, match="algorithm='odd' refuses 'compression', which is no mechanism's key: allowed"
    ):
        resolve({"algorithm": "odd", "dataset": "synthetic-lsq"})


def test_the_old_field_still_refuses_with_a_deprecation_warning(plugged):
    with pytest.warns(DeprecationWarning, match="secagg_refusal= is deprecated, give refuses=\\{'secagg': ...\\}"):
        old = entry("old-style", secagg_refusal="needs each client's vector")
    assert old.refuses == {"secagg": "needs each client's vector"} and old.secagg_refusal == old.refusal("secagg")
    plugged.register(old)
    with pytest.raises(ConfigError, match="secagg=true: algorithm='old-style' needs each client's vector"):
        resolve({**SECAGG, "algorithm": "old-style"})


def test_an_algorithm_has_its_own_default_of_a_common_key(plugged):
    """FedPAQ quantizes its uploads unless told otherwise (its entry's key_defaults); other algorithms keep the
    schema's default, and a run that sets the key keeps its value. A plug-in's own default works the same way."""
    assert resolve({"algorithm": "fedpaq", "dataset": "synthetic-lsq"})["compress-up"] == "qsgd"
    assert resolve({"algorithm": "fedavg", "dataset": "synthetic-lsq"})["compress-up"] == "none"
    given = {"algorithm": "fedpaq", "dataset": "synthetic-lsq", "compress-up": "topk", "compress-up-k": 2}
    assert resolve(given)["compress-up"] == "topk"
    plugged.register(entry("signed", key_defaults={"compress-up": "sign"}))
    assert resolve({"algorithm": "signed", "dataset": "synthetic-lsq"}).compression.uplink == "sign"


def test_an_algorithm_may_refuse_compressed_uploads(plugged):
    plugged.register(entry("exact-only", refuses={"compress-up": "needs its uploads exact"}))
    topk = {"algorithm": "exact-only", "dataset": "synthetic-lsq", "compress-up": "topk", "compress-up-k": 2}
    with pytest.raises(ConfigError, match="compress-up='topk': algorithm='exact-only' needs its uploads exact"):
        resolve(topk)
    assert resolve({"algorithm": "exact-only", "dataset": "synthetic-lsq"}).compression.uplink == "none"
