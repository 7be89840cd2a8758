"""Relaxed initialisation (relaxed-init = β, docs/running/relaxed-init.md): each client starts its round at
x_{i,0} = x^t + β(x^t − x_i^last), x_i^last its own last local model (x^0 before its first round).

Checked: trajectories against independent numpy references of the FedSpeed authors' simulator's form (FedAvg,
SCAFFOLD, FedDyn) under partial participation; round 1 is the plain round bit for bit (x_i^last = x^0 = x^t); the
last local model is declared client state that composes with every algorithm's own state; batched clients equal one
at a time; the one refusal."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.registry import known as registry
from fedsuite.run.inprocess import run_inprocess
from tests import reference as ref
from tests.reference import grad

BETA = 0.3
PARTIAL = {**kit.LSQ, "eval-every": 100000, "num-clients": 6, "clients-per-round": 3, "local-steps": 4,
           "num-server-rounds": 8, "lr-decay": 0.97, "weight-decay": 0.01, "lr": 0.03,
           "relaxed-init": BETA}  # fmt: skip
REFUSED = {"mimesvrg"}


def _relaxed(f: ref.Federation, x: np.ndarray, last: list[np.ndarray], i: int) -> np.ndarray:
    return x + BETA * (x - last[i])


def fedavg(f: ref.Federation) -> np.ndarray:
    """x_{i,0} = x + β(x − x_i^last); x ← x + η_g mean_S(x_{i,K} − x_{i,0}) (the simulator's server step)."""
    x, last = f.x0.copy(), [f.x0.copy() for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, deltas = f.lr(t), f.sampler.cohort(t + 1), []
        for i in cohort:
            start = _relaxed(f, x, last, i)
            last[i] = f.local(i, start, lr, grad)
            deltas.append(last[i] - start)
        x = x + f.server_lr * f.mean(cohort, deltas)
    return x


def scaffold(f: ref.Federation) -> np.ndarray:
    """SCAFFOLD from the relaxed start: c_i⁺ = c_i − c + (x_{i,0} − x_{i,K})/(Kη_l)."""
    x, c = f.x0.copy(), np.zeros_like(f.x0)
    ci, last = [np.zeros_like(f.x0) for _ in range(f.n)], [f.x0.copy() for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, deltas, dcs = f.lr(t), f.sampler.cohort(t + 1), [], []
        for i in cohort:
            start = _relaxed(f, x, last, i)
            xi = f.local(i, start, lr, lambda a, b, y, i=i, c=c: grad(a, b, y) - ci[i] + c)
            new = ci[i] - c + (start - xi) / (f.steps(i) * lr)
            deltas.append(xi - start)
            dcs.append(new - ci[i])
            ci[i], last[i] = new, xi
        x = x + f.server_lr * f.mean(cohort, deltas)
        c = c + np.sum(dcs, axis=0) / f.n
    return x


def feddyn(f: ref.Federation, alpha: float = 0.2) -> np.ndarray:
    """FedDyn with the prox centre and the dual update at the relaxed start, and the simulator's server
    x^{t+1} = mean_S(x_{i,K}) + mean_N(h_i), h_i accumulating x_{i,K} − x_{i,0}."""
    x, h = f.x0.copy(), np.zeros_like(f.x0)
    dual, last = [np.zeros_like(f.x0) for _ in range(f.n)], [f.x0.copy() for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, local_models = f.lr(t), f.sampler.cohort(t + 1), []
        for i in cohort:
            start = _relaxed(f, x, last, i)
            xi = f.local(i, start, lr, lambda a, b, y, i=i, s=start: grad(a, b, y) - dual[i] + alpha * (y - s))
            dual[i] = dual[i] - alpha * (xi - start)
            h = h + (xi - start) / f.n
            last[i] = xi
            local_models.append(xi)
        x = np.mean(local_models, axis=0) + h
    return x


REFERENCES = [("fedavg", {}, fedavg), ("scaffold", {}, scaffold), ("feddyn", {"feddyn-alpha": 0.2}, feddyn)]


@pytest.mark.parametrize("algorithm,extra,reference", REFERENCES, ids=[r[0] for r in REFERENCES])
def test_partial_participation_trajectory_matches_the_simulators_form(algorithm, extra, reference):
    cfg = {**PARTIAL, "algorithm": algorithm, **extra}
    expected = reference(ref.Federation(cfg))
    relaxed = run_inprocess(cfg).x
    plain = run_inprocess({**cfg, "relaxed-init": 0.0}).x
    assert np.linalg.norm(relaxed - expected) / np.linalg.norm(expected) < 1e-5
    assert np.linalg.norm(relaxed - plain) / np.linalg.norm(plain) > 1e-3  # β moved the run


@pytest.mark.parametrize("algorithm", ["fedavg", "feddyn", "fedspeed"])
def test_round_one_is_the_plain_round_bit_for_bit_and_round_two_is_not(algorithm):
    """Before its first round a client's last model is x^0 = x^1, so x_{i,0} = x^1 exactly."""
    one = {**PARTIAL, "num-server-rounds": 1}
    kit.check_reduction(algorithm, algorithm, one, a_keys={"relaxed-init": BETA}, b_keys={"relaxed-init": 0.0})
    two = kit.run_algorithm(algorithm, {**PARTIAL, "num-server-rounds": 2})
    assert not kit.identical(two.x, kit.run_algorithm(algorithm, {**PARTIAL, "num-server-rounds": 2,
                                                                  "relaxed-init": 0.0}).x)  # fmt: skip


COMPOSED = sorted(set(registry.ALGORITHMS.built_in) - REFUSED)


@pytest.mark.parametrize("algorithm", COMPOSED)
def test_the_last_local_model_is_client_state_beside_every_algorithms_own(algorithm):
    """x_last is saved after every accepted reply, changes, and is read back in the next round, next to (and without
    disturbing) each vector the algorithm declares itself; β > 0 changes the run, β = 0 is the plain run."""
    names = kit.check_client_state(algorithm, {"relaxed-init": BETA, "num-clients": 4, "clients-per-round": 2})
    own = kit.check_client_state(algorithm, {"num-clients": 4, "clients-per-round": 2})
    assert names == (*own, "x_last")


def test_the_memory_plan_counts_the_last_local_model():
    from fedsuite.state.plan import state_plan

    for algorithm in ("fedavg", "scaffold"):
        plain = state_plan(resolve({"algorithm": algorithm}), dim=10, buffer_floats=0)
        relaxed = state_plan(resolve({"algorithm": algorithm, "relaxed-init": BETA}), dim=10, buffer_floats=0)
        assert relaxed.vectors == plain.vectors + 1


def test_the_shift_of_the_start_travels_only_for_the_servers_that_average_local_models():
    from fedsuite.registry import costs

    relaxed = resolve({"algorithm": "feddyn", "relaxed-init": BETA})
    assert costs.communication("feddyn", relaxed)[1] == costs.communication("feddyn")[1] + 1
    assert costs.communication("scaffold", resolve({"algorithm": "scaffold", "relaxed-init": BETA})) == (
        costs.communication("scaffold")
    )


@pytest.mark.parametrize("algorithm", ["scaffold", "fedspeed"])
def test_batched_clients_equal_one_at_a_time(algorithm):
    from tests.test_batched_clients import DOUBLE, TOLERANCE_FLOAT64

    cfg = {**DOUBLE, "relaxed-init": BETA, "num-server-rounds": 3}
    plain, batched = kit.run_algorithm(algorithm, cfg), kit.run_algorithm(algorithm, {**cfg, "batch-clients": True})
    gap = float(np.max(np.abs(plain.x.astype(np.float64) - batched.x.astype(np.float64))))
    assert gap <= TOLERANCE_FLOAT64


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"algorithm": "fedavg", "relaxed-init": -0.1}, "relaxed-init=-0.1: must be >= 0"),
        ({"algorithm": "mimesvrg", "relaxed-init": 0.1}, "relaxed-init > 0 with algorithm='mimesvrg'"),
    ],
)
def test_bad_input_is_refused_in_one_line(keys, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve(keys)


@pytest.mark.parametrize("algorithm", ["feddyn", "fadamgt"])
def test_a_stopped_and_resumed_run_equals_the_uninterrupted_one(algorithm, tmp_path):
    """The last local models are in the checkpoint's client state: a run stopped after round 3 and resumed to 5
    equals the uninterrupted run bit for bit (model, server state, every client's state file)."""
    kit.check_checkpoint_round_trip(algorithm, tmp_path, {"relaxed-init": BETA})


def test_the_shift_travels_through_secure_aggregation_and_client_level_dp():
    """FedDyn's extra upload is one more summed array: under SecAgg+ the run stays within the quantisation of the plain
    one; under dp='clients' with no noise and a clip that never bites it is the plain run."""
    cfg = {**PARTIAL, "algorithm": "feddyn", "client-mapping": "fixed"}
    plain = run_inprocess(cfg).x
    secure = run_inprocess({**cfg, "secagg": True}).x
    assert 0 < float(np.abs(secure - plain).max()) < 1e-4 * float(np.abs(plain).max())
    private = run_inprocess({**cfg, "dp": "clients", "dp-noise": 0.0, "dp-clip": 1e6}).x
    assert np.array_equal(private, plain)
