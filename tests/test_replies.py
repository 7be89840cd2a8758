"""Bad client replies (NaN, wrong shape, wrong names, unsampled partition) are rejected and logged, never averaged."""

from __future__ import annotations

import logging

import numpy as np
from flwr.common import FitRes, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import SimpleClientManager

from fedsuite.codec.payload import ARRAYS_KEY
from fedsuite.config.run_config import resolve
from fedsuite.run.inprocess import InProcessProxy, node_contexts
from fedsuite.server.app import build_plan, build_strategy
from tests.helpers import LSQ


def one_round_replies(cfg_dict):
    cfg = resolve(cfg_dict)
    strategy = build_strategy(cfg, build_plan(cfg, record=False))
    manager = SimpleClientManager()
    for context in node_contexts(cfg_dict, cfg["num-clients"]):
        manager.register(InProcessProxy(f"n{context.node_id}", context))
    instructions = strategy.configure_fit(1, strategy.initialize_parameters(manager), manager)
    return strategy, [(proxy, proxy.fit(ins, None, 1)) for proxy, ins in instructions]


def corrupt(res: FitRes, arrays=None, metrics=None) -> FitRes:
    arrays = arrays if arrays is not None else parameters_to_ndarrays(res.parameters)
    return FitRes(res.status, ndarrays_to_parameters(arrays), res.num_examples, {**res.metrics, **(metrics or {})})


def test_bad_replies_are_rejected_and_the_rest_averaged(caplog):
    strategy, results = one_round_replies({**LSQ, "num-clients": 6, "clients-per-round": 6, "min-replies": 0.0})
    x0 = strategy.x.copy()
    good = results[:2]
    delta = parameters_to_ndarrays(results[2][1].parameters)[0]
    bad = [
        (results[2][0], corrupt(results[2][1], [np.full_like(delta, np.nan)])),
        (results[3][0], corrupt(results[3][1], [delta[:-1]])),
        (results[4][0], corrupt(results[4][1], metrics={ARRAYS_KEY: "control"})),
        (results[5][0], corrupt(results[5][1], metrics={"partition-id": 99})),
    ]
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        strategy.aggregate_fit(1, good + bad, [])
    expected = x0 + np.mean([parameters_to_ndarrays(r.parameters)[0] for _, r in good], axis=0)
    np.testing.assert_allclose(strategy.x, expected, rtol=1e-6)
    rejected = [r.message for r in caplog.records if "rejected" in r.message]
    assert len(rejected) == 4
    assert any("non-finite" in m for m in rejected) and any("shape" in m for m in rejected)
    assert any("expects ['delta']" in m for m in rejected) and any("not sampled" in m for m in rejected)
    row = strategy.rounds.row(1)
    assert row["rejected"] == 4 and row["replies"] == 2


def test_all_replies_bad_leaves_the_model_unchanged_when_min_replies_is_zero():
    strategy, results = one_round_replies({**LSQ, "num-clients": 3, "clients-per-round": 3, "min-replies": 0.0})
    x0 = strategy.x.copy()
    nan = [(p, corrupt(r, [np.full(strategy.dim, np.inf, np.float32)])) for p, r in results]
    params, _ = strategy.aggregate_fit(1, nan, [RuntimeError("client crashed")])
    assert params is None and np.array_equal(strategy.x, x0)
    assert strategy.rounds.row(1)["failures"] == 1


def test_metrics_that_are_no_numbers_are_rejected_never_a_crash(caplog):
    strategy, results = one_round_replies({**LSQ, "num-clients": 5, "clients-per-round": 5, "min-replies": 0.0})
    x0 = strategy.x.copy()
    bad = [(p, corrupt(r, metrics=m)) for (p, r), m in zip(results, [
        {"partition-id": "x"}, {"partition-id": float("inf")}, {"steps": 2.5}, {"loss": "low"}, {"lr": None},
    ], strict=True)]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        strategy.aggregate_fit(1, bad, [])
    rejected = [r.message for r in caplog.records if "rejected" in r.message]
    assert len(rejected) == 5 and np.array_equal(strategy.x, x0)
    for text in (
        "partition-id='x' is not a whole number",
        "partition-id=inf is not a whole number",
        "steps=2.5 is not a whole number",
        "loss='low' is not a number",
        "lr=None is not a number",
    ):
        assert any(text in m for m in rejected), text
