"""FedAvg and FedProx against independent numpy implementations (docs/algorithms/fedavg.md, fedprox.md;
docs/developer/verification.md)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.server.client_manager import SimpleClientManager

from fedsuite.config.run_config import resolve
from fedsuite.run.inprocess import InProcessProxy, node_contexts, run_inprocess
from fedsuite.server.app import build_plan, build_strategy
from tests.helpers import LSQ, local_gd, lsq_clients
from tests.observing import Watch


def test_fedavg_one_step_full_participation_is_centralised_gradient_descent():
    cfg = {**LSQ, "weight-decay": 0.01}
    strategy = run_inprocess(cfg)
    clients, wd = lsq_clients(cfg)
    x = strategy.plan.initial_x.astype(np.float64)
    for _ in range(cfg["num-server-rounds"]):
        grad = np.mean([a.T @ (a @ x - b) / len(b) for a, b in clients], axis=0) + wd * x
        x = x - cfg["lr"] * grad
    assert np.linalg.norm(strategy.x - x) / np.linalg.norm(x) < 1e-6
    assert np.linalg.norm(strategy.x - strategy.plan.initial_x) > 1e-2  # it did move


@pytest.mark.parametrize("algorithm,mu", [("fedavg", 0.0), ("fedprox", 0.3)])
def test_multi_step_rounds_match_local_gd_then_average(algorithm, mu):
    cfg = {**LSQ, "algorithm": algorithm, "prox-mu": mu, "local-steps": 7, "num-server-rounds": 6}
    strategy = run_inprocess(cfg)
    clients, wd = lsq_clients(cfg)
    x = strategy.plan.initial_x.astype(np.float64)
    for _ in range(cfg["num-server-rounds"]):
        x = np.mean([local_gd(a, b, x, cfg["lr"], 7, wd, mu) for a, b in clients], axis=0)
    assert np.linalg.norm(strategy.x - x) / np.linalg.norm(x) < 1e-6


def test_fedprox_mu_zero_equals_fedavg_with_minibatches_and_partial_participation():
    cfg = {**LSQ, "batch-size": 5, "local-epochs": 2, "local-steps": 0, "clients-per-round": 3}
    fedavg = run_inprocess({**cfg, "algorithm": "fedavg"})
    fedprox = run_inprocess({**cfg, "algorithm": "fedprox", "prox-mu": 0.0})
    np.testing.assert_allclose(fedprox.x, fedavg.x, rtol=0, atol=1e-7)
    stronger = run_inprocess({**cfg, "algorithm": "fedprox", "prox-mu": 1.0})
    assert np.abs(stronger.x - fedavg.x).max() > 1e-4  # μ really enters the update


def test_server_lr_scales_the_mean_displacement():
    base = {**LSQ, "num-server-rounds": 1}
    one = run_inprocess(base)
    half = run_inprocess({**base, "server-lr": 0.5})
    x0 = one.plan.initial_x
    np.testing.assert_allclose(half.x - x0, 0.5 * (one.x - x0), rtol=1e-5, atol=1e-7)


def test_same_seed_same_numbers_and_same_cohorts_across_algorithms():
    cfg = {**LSQ, "num-clients": 10, "sampling": "bernoulli", "participation": 0.3, "batch-size": 4}
    cohorts = {}
    for algorithm in ("fedavg", "fedadam", "fedavg"):
        seen = []
        spy = Watch(
            replied=lambda server_round, replies, seen=seen: seen.append(sorted(r.partition_id for r in replies))
        )
        result = run_inprocess({**cfg, "algorithm": algorithm}, observers=[spy])
        cohorts.setdefault(algorithm, []).append((seen, result.x.copy()))
    (seen_a, x_a), (seen_b, x_b) = cohorts["fedavg"]
    assert seen_a == seen_b and np.array_equal(x_a, x_b)
    assert cohorts["fedadam"][0][0] == seen_a
    assert len({len(c) for c in seen_a}) > 1  # Bernoulli cohorts vary in size


def test_samples_weighting_weights_displacements_by_client_size():
    cfg = {"model": "logreg", "num-clients": 10, "clients-per-round": 4, "partition-balanced": False,
           "partition-alpha": 0.5, "num-server-rounds": 1, "local-steps": 3, "eval-every": 1000}  # fmt: skip
    seen = []
    weighted = run_inprocess(
        {**cfg, "weighting": "samples"}, observers=[Watch(replied=lambda r, replies: seen.extend(replies))]
    )
    sizes = np.array([r.num_examples for r in seen], np.float64)
    deltas = np.stack([r.arrays["delta"] for r in seen])
    assert len(set(sizes)) > 1  # unbalanced clients
    expected = weighted.plan.initial_x + (sizes[:, None] * deltas).sum(0) / sizes.sum()
    np.testing.assert_allclose(weighted.x, expected, rtol=1e-5, atol=1e-7)
    uniform = run_inprocess({**cfg, "weighting": "uniform"})
    np.testing.assert_allclose(uniform.x, weighted.plan.initial_x + deltas.mean(0), rtol=1e-5, atol=1e-7)


def test_aggregation_sees_replies_in_partition_order_whatever_the_arrival_order():
    """Float sums depend on order; sorting by partition id makes the same seed give the same numbers."""
    cfg = {**LSQ, "num-clients": 6, "clients-per-round": 6, "batch-size": 4, "num-server-rounds": 3}
    orders = []

    resolved = resolve(cfg)
    backward = build_strategy(
        resolved,
        build_plan(resolved, record=False),
        [Watch(replied=lambda r, replies: orders.append([x.partition_id for x in replies]))],
    )
    manager = SimpleClientManager()
    for context in node_contexts(cfg, 2):
        manager.register(InProcessProxy(str(context.node_id), context))
    for server_round in range(1, 4):  # Flower's round by hand, with the replies arriving in reverse partition order
        sent = backward.configure_fit(server_round, None, manager)
        results = [(proxy, proxy.fit(ins, None, server_round)) for proxy, ins in sent]
        backward.aggregate_fit(server_round, sorted(results, key=lambda pr: -pr[1].metrics["partition-id"]), [])
    assert orders == [list(range(6))] * 3
    assert np.array_equal(run_inprocess(cfg).x, backward.x)
