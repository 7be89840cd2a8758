"""FedAvgM and FedExP (docs/algorithms/fedavgm.md, docs/algorithms/fedexp.md): one aggregation of each against its
formula written here in numpy, their reductions to FedAvg, their fixed point on least squares, FedExP's evaluation
of the last two iterates and its η_g^t in the rows, and their refusals. The evaluation hook at its default leaves
every other rule evaluating x itself."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.registry import known as registry
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule
from fedsuite.server.sampling import Sampler
from fedsuite.strategies.fedavgm import FedAvgM
from fedsuite.strategies.fedexp import FedExP
from tests import reference as ref

DIM = 6
SIZES = [20, 5, 40, 13]


def replies(rng, spread: bool = False) -> list[Reply]:
    """Random displacements; with `spread`, far apart around a small common move (FedExP's step well above 1)."""
    noise = [rng.normal(size=DIM) for _ in SIZES]
    deltas = [2 * (d - np.mean(noise, axis=0)) + 0.3 for d in noise] if spread else noise
    pairs = enumerate(zip(SIZES, deltas, strict=True))
    return [Reply(i, n, 3, 0.1, {"delta": d.astype(np.float32)}) for i, (n, d) in pairs]


def settings(x0, weighting: str, lr_decay: float = 1.0) -> RuleSettings:
    return RuleSettings(initial_x=x0, sampler=Sampler(4, "fixed", 4), lr=0.1, lr_decay=lr_decay, weighting=weighting)


def weights(weighting: str) -> np.ndarray:
    return np.array(SIZES, float) / sum(SIZES) if weighting == "samples" else np.full(len(SIZES), 1 / len(SIZES))


# ---- one aggregation against the formulas --------------------------------------------------------------------------
@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_two_fedavgm_aggregations_are_the_momentum_update(weighting):
    """v ← β v + Σ p_i Δ_i (v^0 = 0), x ← x + η_g v, two rounds."""
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=DIM).astype(np.float32)
    beta, server_lr, p = 0.7, 0.5, weights(weighting)
    rule = FedAvgM(settings(x0, weighting), beta=beta, server_lr=server_lr)
    x, v = x0.astype(np.float64), np.zeros(DIM)
    for server_round in (1, 2):
        got = replies(rng)
        v = beta * v + sum(pi * r.arrays["delta"] for pi, r in zip(p, got, strict=True))
        x = x + server_lr * v
        rule.x = rule.aggregate(server_round, got).astype(np.float32)
        np.testing.assert_allclose(rule.v, v, rtol=1e-12)
        np.testing.assert_allclose(rule.x, x, rtol=1e-6)


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_one_fedexp_aggregation_is_the_papers_step_with_the_decayed_epsilon(weighting):
    """η_g = max(1, Σ p_i ‖Δ_i‖² / (2(‖Σ p_i Δ_i‖² + |S| ε γ^{2(t−1)}))), x ← x + η_g Σ p_i Δ_i, in round 3."""
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=DIM).astype(np.float32)
    eps, gamma, p, server_round = 0.1, 0.9, weights(weighting), 3
    rule = FedExP(settings(x0, weighting, lr_decay=gamma), eps=eps, eval_average=False)
    got = replies(rng, spread=True)
    deltas = [r.arrays["delta"].astype(np.float64) for r in got]
    mean = sum(pi * d for pi, d in zip(p, deltas, strict=True))
    spread = sum(pi * float(d @ d) for pi, d in zip(p, deltas, strict=True))
    step = max(1.0, spread / (2 * (float(mean @ mean) + len(got) * eps * gamma ** (2 * (server_round - 1)))))
    undecayed = spread / (2 * (float(mean @ mean) + len(got) * eps))
    assert step > 1.5 and step > 1.02 * undecayed  # the decay of ε shows
    np.testing.assert_allclose(rule.aggregate(server_round, got), x0 + step * mean, rtol=1e-12)
    assert rule.round_figures(server_round) == {"server_lr": pytest.approx(step, rel=1e-12)}


def test_fedexp_step_is_one_when_the_clients_agree():
    """Equal displacements: mean ‖Δ_i‖² = ‖Δ̄‖², so the ratio is below 1/2 and η_g = 1 (FedAvg's step)."""
    rng = np.random.default_rng(2)
    x0 = rng.normal(size=DIM).astype(np.float32)
    same = rng.normal(size=DIM).astype(np.float32)
    rule = FedExP(settings(x0, "uniform"), eps=1e-3, eval_average=False)
    got = [Reply(i, n, 3, 0.1, {"delta": same}) for i, n in enumerate(SIZES)]
    rule.aggregate(1, got)
    assert rule.step_size == 1.0


# ---- reductions ----------------------------------------------------------------------------------------------------
def test_fedavgm_with_beta_zero_is_fedavg_bit_for_bit():
    kit.check_reduction("fedavgm", "fedavg", a_keys={"fedavgm-beta": 0.0, "server-lr": 0.8},
                        b_keys={"server-lr": 0.8}, knob={"fedavgm-beta": 0.9})  # fmt: skip


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_fedexp_with_a_huge_epsilon_is_fedavg_bit_for_bit(weighting):
    """ε = 1e30 forces η_g^t = 1; the knob ε = 1e-8 lets the step grow above 1 on the heterogeneous federation."""
    exact = {"fedexp-eps": 1e30, "fedexp-eval-average": False}
    kit.check_reduction("fedexp", "fedavg", {"weighting": weighting}, a_keys=exact, knob={"fedexp-eps": 1e-8})


# ---- the fixed point on least squares --------------------------------------------------------------------------------
def test_momentum_and_extrapolation_keep_fedavgs_drift_biased_fixed_point():
    """Both scale the mean move, so they stop where mean_S Δ_i = 0: FedAvg's point, measurably away from x*. FedExP
    gets there still extrapolating: near the point Δ̄ → 0 while the Δ_i do not, so η_g^t tends to
    mean ‖Δ_i‖² / (2|S|ε), here about 3.5."""
    cfg = {**kit.LSQ, "num-server-rounds": 120, "eval-every": 100000}
    lsq = kit.least_squares(cfg)
    plain = kit.run_algorithm("fedavg", cfg).x.astype(np.float64)
    bias = np.linalg.norm(plain - lsq.x_star)
    assert lsq.relative_error(plain) > 1e-2  # FedAvg's drift bias
    momentum = kit.run_algorithm("fedavgm", {**cfg, "fedavgm-beta": 0.5})
    extrapolated = kit.run_algorithm("fedexp", {**cfg, "fedexp-eps": 1e-2})
    for name, run in (("fedavgm", momentum), ("fedexp", extrapolated)):
        gap = np.linalg.norm(run.x - plain) / bias
        assert gap < 1e-5, f"{name} ends {gap:.2e} of FedAvg's bias away from FedAvg's point"
    assert extrapolated.rounds[-1].row["server_lr"] > 3.0


def test_fedexp_with_a_tiny_epsilon_does_not_settle():
    """The other side (docs/algorithms/fedexp.md): with ε → 0 the step near the fixed point is unbounded, and the
    iterates keep jumping around FedAvg's point instead of settling on it."""
    cfg = {**kit.LSQ, "num-server-rounds": 120, "eval-every": 100000}
    lsq = kit.least_squares(cfg)
    plain = kit.run_algorithm("fedavg", cfg).x.astype(np.float64)
    run = kit.run_algorithm("fedexp", {**cfg, "fedexp-eps": 1e-6})
    assert np.linalg.norm(run.x - plain) > 0.1 * np.linalg.norm(plain - lsq.x_star)


def test_fedexp_extrapolates_on_the_heterogeneous_federation():
    run = kit.run_algorithm("fedexp", {**kit.PARTIAL, "fedexp-eps": 1e-6})
    steps = [obs.row["server_lr"] for obs in run.rounds if obs.round > 0]
    assert len(steps) == kit.PARTIAL["num-server-rounds"] and min(steps) >= 1.0 and max(steps) > 1.0
    assert all("server_lr" not in obs.row for obs in kit.run_algorithm("fedavg", kit.PARTIAL).rounds)


# ---- FedExP's evaluation of the last two iterates ------------------------------------------------------------------
def test_fedexp_evaluates_the_mean_of_its_last_two_iterates():
    """Round 1 evaluates x^1 (the authors' code), round t ≥ 2 (x^t + x^{t−1})/2; training continues from x^t: the
    models are those of eval-average=false."""
    cfg = {**kit.LSQ, "num-server-rounds": 4, "fedexp-eps": 1e-6}
    lsq = kit.least_squares(cfg)
    averaged = kit.run_algorithm("fedexp", cfg)
    plain = kit.run_algorithm("fedexp", {**cfg, "fedexp-eval-average": False})
    assert all(kit.identical(a.x, b.x) for a, b in zip(averaged.rounds, plain.rounds, strict=True))
    models = {obs.round: obs.x.astype(np.float64) for obs in averaged.rounds}
    rows = {obs.round: obs.row for obs in averaged.rounds}
    for t in (1, 2, 3, 4):
        evaluated = models[t] if t == 1 else (models[t] + models[t - 1]) / 2
        assert rows[t]["relative_error"] == pytest.approx(lsq.relative_error(evaluated), rel=1e-5)
    assert plain.rounds[-1].row["relative_error"] == pytest.approx(lsq.relative_error(models[4]), rel=1e-5)
    assert rows[4]["relative_error"] != plain.rounds[-1].row["relative_error"]


def test_fedexp_resumes_its_evaluation_exactly(tmp_path):
    kit.check_checkpoint_round_trip("fedexp", tmp_path, {"fedexp-eps": 1e-6, "eval-every": 1})


def test_every_other_rule_evaluates_x_itself_and_adds_nothing_to_its_rows():
    """The hook's default is x, the same array (the evaluation of every other algorithm is unchanged), and no
    figures: only FedExP overrides them."""
    overriding = set()
    for name in registry.ALGORITHMS.built_in:
        cls = registry.load_class(registry.ALGORITHMS[name].strategy)
        if cls.evaluation_model is not ServerRule.evaluation_model or cls.round_figures is not ServerRule.round_figures:
            overriding.add(name)
    assert overriding == {"fedexp"}
    rule = FedAvgM(settings(np.ones(DIM, np.float32), "uniform"))
    assert rule.evaluation_model() is rule.x and rule.round_figures(1) == {}


# ---- refusals ------------------------------------------------------------------------------------------------------
FEDEXP_NORMS = "algorithm='fedexp' computes its server step size from each client's ‖Δ_i‖²"


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"algorithm": "fedavgm", "fedavgm-beta": 1.0}, "fedavgm-beta=1.0: must be in [0, 1)"),
        ({"algorithm": "fedavgm", "fedavgm-beta": -0.1}, "fedavgm-beta=-0.1: must be in [0, 1)"),
        ({"algorithm": "fedexp", "fedexp-eps": 0.0}, "fedexp-eps=0.0: must be > 0"),
        ({"algorithm": "fedexp", "fedexp-eps": -1.0}, "fedexp-eps=-1.0: must be > 0"),
        ({"algorithm": "fedexp", "fedexp-eval-average": 1}, "fedexp-eval-average=1: expected true or false"),
        ({"algorithm": "fedexp", "secagg": True, "client-mapping": "fixed"}, f"secagg=true: {FEDEXP_NORMS}"),
        ({"algorithm": "fedexp", "dp": "server"}, f"dp='server': {FEDEXP_NORMS}"),
        ({"algorithm": "fedexp", "dp": "clients"}, f"dp='clients': {FEDEXP_NORMS}"),
        ({"algorithm": "fedexp", "agg-scale": "1/N"}, "agg-scale='1/N': defined for"),
        ({"algorithm": "fedavgm", "agg-scale": "1/N"}, "agg-scale='1/N': defined for"),
    ],
)
def test_what_they_do_not_define_is_refused_in_one_line(keys, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        resolve(keys)
    assert any(message in line and "\n" not in line for line in str(err.value).splitlines())


def test_server_momentum_is_post_processing_so_fedavgm_takes_secagg():
    assert resolve({"algorithm": "fedavgm", "secagg": True, "client-mapping": "fixed"})["secagg"] is True


# ---- whole runs against independent numpy references (tests/reference.py) ---------------------------------------
TRAJECTORY = {**kit.LSQ, "eval-every": 100000, "num-clients": 6, "clients-per-round": 3, "local-steps": 4,
              "num-server-rounds": 8, "lr-decay": 0.97, "weight-decay": 0.01, "lr": 0.03}  # fmt: skip


@pytest.mark.parametrize(
    "algorithm,keys,reference",
    [
        ("fedavgm", {"fedavgm-beta": 0.7, "server-lr": 0.8}, lambda f: ref.fedavgm(f, 0.7)),
        ("fedexp", {"fedexp-eps": 1e-4, "fedexp-eval-average": False}, lambda f: ref.fedexp(f, 1e-4)),
    ],
    ids=["fedavgm", "fedexp"],
)
def test_partial_participation_trajectory_matches_numpy_reference(algorithm, keys, reference):
    ref.check_trajectory({**TRAJECTORY, "algorithm": algorithm, **keys}, reference)
