"""Math-verification harness for the drift-correction family (docs/algorithms/, docs/developer/verification.md).

Every claim is checked on both sides: drift-free methods reach x*, FedAvg/FedProx visibly do not; reductions
hold to 1e-6 and the reduced-from knob really changes the result when turned on.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.run.inprocess import run_inprocess
from tests import reference as ref

# Heterogeneous least squares: 5 clients with their own optima and curvatures, closed-form x*.
FED = {**kit.LSQ, "eval-every": 100000}  # num-server-rounds 20, the schema default
# Partial participation, lr decay and weight decay for trajectory checks against the numpy references.
PARTIAL = {**FED, "num-clients": 6, "clients-per-round": 3, "local-steps": 4, "num-server-rounds": 8,
           "lr-decay": 0.97, "weight-decay": 0.01, "lr": 0.03}  # fmt: skip
# Minibatches and partial participation for reductions (identities hold for any data order).
MINIBATCH = {**FED, "num-clients": 6, "clients-per-round": 3, "batch-size": 7, "local-steps": 0, "local-epochs": 2,
             "num-server-rounds": 6, "weight-decay": 0.01}  # fmt: skip


def final(cfg: dict):
    strategy = run_inprocess(cfg)
    return strategy, strategy.plan.evaluate(strategy.x)["relative_error"]


def rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


# ---- fixed points (docs/developer/verification.md) -----------------------------------------------------------
EXACT = {
    "scaffold": {},
    "feddyn": {"feddyn-alpha": 0.3},
    "fedspeed": {"fedspeed-rho": 0.0, "fedspeed-mu": 0.3},
    "fedadmm": {"fedadmm-rho": 0.3},
}


@pytest.mark.parametrize("algorithm", list(EXACT))
def test_drift_free_methods_reach_the_optimum(algorithm):
    _, error = final({**FED, "algorithm": algorithm, "num-server-rounds": 250, **EXACT[algorithm]})
    assert error < 1e-6


@pytest.mark.parametrize("algorithm,extra", [("fedavg", {}), ("fedprox", {"prox-mu": 0.3})])
def test_fedavg_and_fedprox_stall_at_the_drift_bias(algorithm, extra):
    _, error = final({**FED, "algorithm": algorithm, "num-server-rounds": 250, **extra})
    assert error > 1e-2


def test_fedcm_and_fedmim_reduce_drift_without_removing_it():
    rounds = {**FED, "num-server-rounds": 150}
    _, avg = final({**rounds, "algorithm": "fedavg"})
    _, cm_03 = final({**rounds, "algorithm": "fedcm", "fedcm-alpha": 0.3})
    _, cm_01 = final({**rounds, "algorithm": "fedcm", "fedcm-alpha": 0.1})
    assert 1e-4 < cm_01 < cm_03 < avg  # roughly α × FedAvg's error
    _, mim_weak = final({**rounds, "algorithm": "fedmim", "fedmim-alphas": "0.5,0.2", "fedmim-betas": "0.5,0.1"})
    _, mim_strong = final({**rounds, "algorithm": "fedmim", "fedmim-alphas": "0.6,0.3", "fedmim-betas": "0.9,0.1"})
    assert 1e-4 < mim_strong < mim_weak < avg  # A = 0.1 beats A = 0.3


def test_fedadmm_gong_converges_to_the_anchored_optimum():
    """docs/algorithms/fedadmm.md: (G) as read here solves argmin f + (c/2)‖x − x^0‖², not f. Its uplink is 2Δ_i, so
    with server lr η_g the duals sum to Σλ_i = N·ρ/(2η_g)·(x − x^0): c = ρ/(2η_g), the documented ρ at η_g = 0.5 (Gong's
    later value)."""
    rho, server_lr = 0.2, 0.5
    strategy, error = final({**FED, "algorithm": "fedadmm", "fedadmm-variant": "gong", "fedadmm-rho": rho,
                             "server-lr": server_lr, "num-server-rounds": 500})  # fmt: skip
    fed = ref.Federation({**FED})
    h = np.mean([a.T @ a / len(b) for a, b in fed.clients], axis=0)
    r = np.mean([a.T @ b / len(b) for a, b in fed.clients], axis=0)
    c = rho / (2 * server_lr)
    anchored = np.linalg.solve(h + c * np.eye(len(r)), r + c * fed.x0)
    assert rel(strategy.x, anchored) < 1e-5 and error > 1e-3


# ---- trajectories against the independent numpy implementations ------------------------------------------
TRAJECTORIES = [
    ("scaffold", {}, lambda f: ref.scaffold(f)),
    ("feddyn", {"feddyn-alpha": 0.2}, lambda f: ref.feddyn(f, 0.2)),
    ("feddyn", {"feddyn-alpha": 0.2, "dual-storage": "server"}, lambda f: ref.feddyn(f, 0.2)),
    ("fedspeed", {"fedspeed-mu": 0.2, "fedspeed-rho": 0.05}, lambda f: ref.feddyn(f, 0.2, rho=0.05)),
    ("fedspeed", {"fedspeed-mu": 0.2, "fedspeed-rho": 0.05, "fedspeed-alpha": 0.5},
     lambda f: ref.feddyn(f, 0.2, rho=0.05, mix=0.5)),
    ("fedspeed", {"fedspeed-mu": 0.2, "fedspeed-rho": 0.05, "dual-storage": "server"},
     lambda f: ref.feddyn(f, 0.2, rho=0.05)),
    ("fedspeed-ing", {"fedspeed-mu": 0.2, "fedspeed-rho": 0.05, "fedspeed-ing-zeta": 0.3,
                      "fedspeed-ing-dual-agg": "sampled"}, lambda f: ref.fedspeed_ing(f, 0.2, 0.05, 0.3)),
    ("fedadmm", {"fedadmm-rho": 0.2}, lambda f: ref.fedadmm_wang(f, 0.2)),
    ("fedcm", {"fedcm-alpha": 0.3}, lambda f: ref.fedcm(f, 0.3)),
    ("mofedsam", {"fedcm-alpha": 0.3, "sam-rho": 0.05}, lambda f: ref.fedcm(f, 0.3, rho=0.05)),
    ("fedmim", {"fedmim-alphas": "0.5,0.2", "fedmim-betas": "0.7,0.2"},
     lambda f: ref.fedmim(f, (0.5, 0.2), (0.7, 0.2))),
]  # fmt: skip


@pytest.mark.parametrize(
    "algorithm,extra,reference", TRAJECTORIES, ids=[f"{a}-{i}" for i, (a, *_) in enumerate(TRAJECTORIES)]
)
def test_partial_participation_trajectory_matches_numpy_reference(algorithm, extra, reference):
    cfg = {**PARTIAL, "algorithm": algorithm, **extra}
    expected = reference(ref.Federation(cfg))
    strategy = run_inprocess(cfg)
    assert rel(strategy.x, expected) < 1e-5
    assert rel(strategy.x, ref.Federation(cfg).x0) > 1e-2  # it moved


# ---- reduction identities (docs/developer/verification.md) ---------------------------------------------------
REDUCTIONS = [
    ("fedcm", {"fedcm-alpha": 1.0}, "fedavg", {}, {"fedcm-alpha": 0.5}),
    ("mofedsam", {"fedcm-alpha": 1.0, "sam-rho": 0.0}, "fedavg", {}, {"sam-rho": 0.1}),
    ("fedsam", {"sam-rho": 0.0}, "fedavg", {}, {"sam-rho": 0.1}),
    ("fedmim", {"fedmim-alphas": "0,0", "fedmim-betas": "0,0"}, "fedavg", {}, {"fedmim-betas": "0.5,0"}),
    ("fedmim", {"fedmim-alphas": "0.9", "fedmim-betas": "0"}, "fedcm", {"fedcm-alpha": 0.1}, {"fedmim-betas": "0.5"}),
    ("fedspeed", {"fedspeed-rho": 0.0, "fedspeed-mu": 0.2}, "feddyn", {"feddyn-alpha": 0.2}, {"fedspeed-rho": 0.1}),
    ("feddyn", {"dual-storage": "server"}, "feddyn", {"dual-storage": "client"}, {"feddyn-alpha": 0.3}),
    ("fedspeed-ing", {"fedspeed-ing-zeta": 0.0}, "fedspeed", {}, {"fedspeed-ing-zeta": 0.3}),  # both defaults: 'all'
]  # fmt: skip


@pytest.mark.parametrize(
    "algo,extra,base,base_extra,knob", REDUCTIONS, ids=[f"{r[0]}={r[2]}-{i}" for i, r in enumerate(REDUCTIONS)]
)
def test_reduction_identities(algo, extra, base, base_extra, knob):
    reduced = run_inprocess({**MINIBATCH, "algorithm": algo, **extra}).x
    expected = run_inprocess({**MINIBATCH, "algorithm": base, **base_extra}).x
    turned_on = run_inprocess({**MINIBATCH, "algorithm": algo, **extra, **knob}).x
    assert rel(reduced, expected) < 1e-6
    assert rel(turned_on, expected) > 1e-4


def test_scaffold_first_round_is_fedavg():
    one = {**MINIBATCH, "num-server-rounds": 1}
    assert (
        rel(run_inprocess({**one, "algorithm": "scaffold"}).x, run_inprocess({**one, "algorithm": "fedavg"}).x) < 1e-6
    )
    two = {**MINIBATCH, "num-server-rounds": 2}
    assert (
        rel(run_inprocess({**two, "algorithm": "scaffold"}).x, run_inprocess({**two, "algorithm": "fedavg"}).x) > 1e-4
    )


@pytest.mark.parametrize("algorithm", ["fedspeed", "fedspeed-ing"])
def test_thesis_form_equals_code_form_under_full_participation(algorithm):
    full = {**MINIBATCH, "clients-per-round": 6, "algorithm": algorithm, "fedspeed-rho": 0.05}
    key = "fedspeed-dual-agg" if algorithm == "fedspeed" else "fedspeed-ing-dual-agg"
    thesis = run_inprocess({**full, key: "sampled"}).x
    code = run_inprocess({**full, key: "all"}).x
    assert rel(thesis, code) < 1e-6
    partial = {**full, "clients-per-round": 3}
    assert rel(run_inprocess({**partial, key: "sampled"}).x, run_inprocess({**partial, key: "all"}).x) > 1e-4


# ---- harness gaps: minibatches, Bernoulli cohorts of varying size, η_g ≠ 1, unequal K_i, weighting ----
# Epoch mode with B = 7 on 20 rows: 3 minibatches per epoch, the last one partial; the numpy references replay
# fedsuite's minibatch order (tests/reference.py: Federation.batches) and nothing else.
MINI = {**PARTIAL, "batch-size": 7, "local-steps": 0, "local-epochs": 2, "sampling": "bernoulli", "participation": 0.5,
        "min-replies": 0.0}  # fmt: skip
GAPS = [
    ("scaffold", {"server-lr": 0.7}, lambda f: ref.scaffold(f)),
    ("fedsam", {"sam-rho": 0.05, "server-lr": 0.7}, lambda f: ref.fedsam(f, 0.05)),  # both gradients, one minibatch
    ("fedspeed", {"fedspeed-mu": 0.2, "fedspeed-rho": 0.05, "fedspeed-dual-agg": "sampled"},
     lambda f: ref.fedspeed_ing(f, 0.2, 0.05, 0.0)),  # the thesis form under partial participation
]  # fmt: skip


@pytest.mark.parametrize("algorithm,extra,reference", GAPS, ids=[g[0] for g in GAPS])
def test_minibatch_bernoulli_trajectory_matches_numpy_reference(algorithm, extra, reference):
    cfg = {**MINI, "algorithm": algorithm, **extra}
    f = ref.Federation(cfg)
    sizes = {len(f.sampler.cohort(t)) for t in range(1, f.rounds + 1)}
    assert len(sizes) > 1  # the cohort size really varies
    assert rel(run_inprocess(cfg).x, reference(f)) < 1e-5


def test_unequal_local_steps_and_sample_weighting_match_numpy_reference():
    """Clients of 8..20 rows in epoch mode take K_i = E·ceil(n_i/B) = 4..6 steps; SCAFFOLD divides each client's
    displacement by its own K_i·η_l and the server weights by n_i (weighting='samples')."""
    from fedsuite.config.run_config import resolve
    from fedsuite.data import load_dataset

    cfg = {**MINI, "algorithm": "scaffold", "weighting": "samples", "synthetic-noise": 0.123, "server-lr": 0.7}
    fed = load_dataset(resolve(cfg))  # the cached federation both sides read
    full = fed.client_parts
    fed.client_parts = [p[: 8 + 2 * i] for i, p in enumerate(full)]
    try:
        f = ref.Federation(cfg)
        assert len({f.steps(i) for i in range(f.n)}) > 1
        expected = ref.scaffold(f)
        assert rel(run_inprocess(cfg).x, expected) < 1e-5
        uniform = ref.scaffold(ref.Federation({**cfg, "weighting": "uniform"}))
        assert rel(uniform, expected) > 1e-3  # the weighting matters here
    finally:
        fed.client_parts = full
