"""Unequal local work (docs/running/systems.md): the keys and their refusals, the seeded K_i the server's system model
sends, the rows that show them, the rows and numbers untouched when it is off, and what each algorithm converges to
when the clients take different K_i, checked against numpy on a heterogeneous least-squares federation; and a Ray run
that sends the same K_i as the in-process engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.registry import known as registry
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.observers import RoundObserver
from fedsuite.systems import STEPS_KEY, LocalWork, SystemModel
from fedsuite.systems.stage import SystemsStage
from simulation.launcher import launch
from simulation.launcher.processes import tagged_processes
from simulation.run import main as run_main
from tests.conftest import SESSION

# The kit's least-squares federation (5 clients, all in every round, full-batch local gradient descent), each
# client taking its own K_i in [1, 20], fixed per client.
UNEQUAL = {**kit.LSQ, "local-work": "uniform", "local-steps-min": 1, "local-steps": 20, "eval-every": 100000}


def work_of(run_config: dict) -> LocalWork:
    return SystemModel.from_run_config(resolve(run_config)).work


def rel(x, y) -> float:
    return float(np.linalg.norm(np.asarray(x, np.float64) - y) / np.linalg.norm(y))


class StepsSeen(RoundObserver):
    """The K_i each accepted reply took, by round and partition, and the rows recorded."""

    def __init__(self):
        self.steps: dict[int, dict[int, int]] = {}
        self.rows: list[dict] = []

    def replied(self, server_round, replies):
        self.steps[server_round] = {r.partition_id: r.steps for r in replies}

    def recorded(self, row):
        self.rows.append(dict(row))


# ---- the keys ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "keys,message",
    [
        ({"local-work": "uniform", "local-steps": 10}, "local-work='uniform' needs local-steps-min >= 1"),
        ({"local-work": "per-round", "local-steps-min": 2},
         "local-work='per-round' draws K_i from [local-steps-min, local-steps]; local-steps=0 is epoch mode"),
        ({"local-work": "uniform", "local-steps-min": 12, "local-steps": 10},
         "local-steps-min=12 > local-steps=10: K_i is drawn from [local-steps-min, local-steps]"),
        ({"local-steps-min": 3, "local-steps": 10},
         "local-steps-min=3 is read only with local-work='uniform' or 'per-round'"),
        ({"local-work": "random"}, "local-work='random': allowed values are equal, uniform, per-round"),
        ({"local-work": "per-round", "local-steps-min": 2, "local-steps": 10, "dp-sgd": True},
         "dp-sgd=true with local-work='per-round': a client's privacy ledger counts its rounds with one K_i"),
        ({"algorithm": "fedcm", "secagg": True, "client-mapping": "fixed", "local-work": "uniform",
          "local-steps-min": 2, "local-steps": 10},
         "secagg=true with local-work='uniform' or 'per-round': the server weighs each Δ_i by its own step count"),
    ],
)  # fmt: skip
def test_a_bad_local_work_setting_is_refused_in_one_line_naming_the_key(keys, message):
    assert_refused(keys, message)


def assert_refused(keys: dict, message: str) -> None:
    """Resolving `keys` fails with one line (of the error's list) that starts with `message`."""
    with pytest.raises(ConfigError) as caught:
        resolve(keys)
    lines = str(caught.value).splitlines()[1:]
    assert any(line.strip().startswith(message) for line in lines), lines


def test_simulation_run_refuses_it_with_exit_code_2_before_any_work(capsys):
    assert run_main(["--check", "-c", "local-work='uniform' local-steps=10"]) == 2
    assert "local-work='uniform' needs local-steps-min >= 1" in capsys.readouterr().err


def test_the_k_i_draws_are_seeded_in_range_and_fixed_or_redrawn_by_mode():
    uniform = work_of(UNEQUAL)
    per_round = work_of({**UNEQUAL, "local-work": "per-round"})
    for plan in (uniform, per_round):
        drawn = [plan.steps(t, i) for t in range(1, 10) for i in range(200)]
        assert min(drawn) == 1 and max(drawn) == 20 and set(drawn) == set(range(1, 21))
    assert all(uniform.steps(t, i) == uniform.steps(1, i) for t in range(1, 30) for i in range(5))
    assert any(per_round.steps(t, 0) != per_round.steps(1, 0) for t in range(2, 30))
    assert work_of(UNEQUAL) == uniform
    other_seed = work_of({**UNEQUAL, "seed": 1})
    assert [other_seed.steps(1, i) for i in range(5)] != [uniform.steps(1, i) for i in range(5)]
    assert work_of(kit.LSQ).steps(1, 0) is None  # equal work decides nothing


@pytest.mark.parametrize("mode", ["uniform", "per-round"])
def test_each_client_takes_the_k_i_the_server_sent_and_the_rows_show_them(mode):
    cfg = {**UNEQUAL, "local-work": mode, "num-server-rounds": 3}
    seen = StepsSeen()
    strategy = run_inprocess({**cfg, "algorithm": "fedavg"}, observers=[seen])
    plan = work_of(cfg)
    systems = next(stage for stage in strategy.stages if isinstance(stage, SystemsStage))
    assert systems.client_config(1, 0) == {STEPS_KEY: plan.steps(1, 0)}
    for t, steps in seen.steps.items():
        assert steps == {i: plan.steps(t, i) for i in range(5)}
    trained = [row for row in seen.rows if row["round"] > 0]
    assert len(trained) == 3
    for row in trained:
        ks = list(seen.steps[row["round"]].values())
        assert (row["steps_min"], row["steps_max"]) == (min(ks), max(ks))
        assert row["steps_mean"] == pytest.approx(np.mean(ks))
    if mode == "per-round":
        assert len({tuple(s.values()) for s in seen.steps.values()}) > 1


# ---- off: nothing changes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "fedcm", "losac"])
def test_local_work_equal_is_bit_identical_to_not_setting_it(algorithm):
    base = {**kit.PARTIAL, "num-server-rounds": 3}
    plain = kit.run_algorithm(algorithm, base)
    explicit = kit.run_algorithm(algorithm, {**base, "local-work": "equal", "local-steps-min": 0})
    assert kit.identical(plain.x, explicit.x)
    assert all(kit.identical(a.x, b.x) for a, b in zip(plain.rounds, explicit.rounds, strict=True))
    for a, b in zip(plain.rounds, explicit.rounds, strict=True):
        assert "steps_min" not in b.row
        assert set(a.row) == set(b.row)
    assert SystemModel.from_run_config(resolve(base)).fit_config(1, 0) == {}  # nothing added to a fit config


def test_k_max_for_every_client_equals_equal_work_with_local_steps():
    """local-steps-min = local-steps: every K_i is local-steps, so the run is the equal-work run bit for bit."""
    base = {**kit.PARTIAL, "num-server-rounds": 3}
    equal = kit.run_algorithm("scaffold", base)
    pinned = kit.run_algorithm("scaffold", {**base, "local-work": "per-round", "local-steps-min": 3})
    assert kit.identical(equal.x, pinned.x)


def test_a_resumed_run_draws_the_same_k_i_and_ends_bit_identical(tmp_path):
    per_round = {"local-work": "per-round", "local-steps-min": 1, "local-steps": 5}
    kit.check_checkpoint_round_trip("scaffold", tmp_path, per_round, stop_after=2, rounds=4)


# ---- every algorithm runs under unequal work -----------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", registry.ALGORITHMS.built_in)
def test_every_built_in_trains_with_per_round_k_i(algorithm):
    cfg = {**kit.PARTIAL, "num-server-rounds": 2, "local-work": "per-round", "local-steps-min": 1, "local-steps": 5,
           "algorithm": algorithm}  # fmt: skip
    seen = StepsSeen()
    strategy = run_inprocess(cfg, observers=[seen])
    plan = work_of(cfg)
    assert np.all(np.isfinite(strategy.x))
    for t, steps in seen.steps.items():
        assert steps and all(k == plan.steps(t, i) for i, k in steps.items())


# ---- least squares: what each algorithm converges to ---------------------------------------------------------------
def local_gd_maps(lsq: kit.LeastSquares, steps: list[int], lr: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Client i's K_i full-batch gradient steps on F_i(x) = (1/2n)‖A_i x − b_i‖² from x, as the affine map
    x ↦ M_i x + c_i (M_i = (I − ηH_i)^{K_i}), in numpy."""
    out = []
    for (a, b), k in zip(lsq.clients, steps, strict=True):
        h, r = a.T @ a / len(b), a.T @ b / len(b)
        t = np.eye(len(r)) - lr * h
        c = np.zeros(len(r))
        for _ in range(k):
            c = t @ c + lr * r
        out.append((np.linalg.matrix_power(t, k), c))
    return out


def fedavg_fixed_point(lsq, steps, lr) -> np.ndarray:
    """x = mean_i (M_i x + c_i): the fixed point of full-participation FedAvg (uniform weights)."""
    maps = local_gd_maps(lsq, steps, lr)
    dim = len(maps[0][1])
    return np.linalg.solve(np.eye(dim) - np.mean([m for m, _ in maps], 0), np.mean([c for _, c in maps], 0))


def fednova_fixed_point(lsq, steps, lr) -> np.ndarray:
    """mean_i (M_i x + c_i − x)/K_i = 0: where FedNova's normalised mean update vanishes."""
    maps = local_gd_maps(lsq, steps, lr)
    dim = len(maps[0][1])
    lhs = np.mean([(np.eye(dim) - m) / k for (m, _), k in zip(maps, steps, strict=True)], 0)
    return np.linalg.solve(lhs, np.mean([c / k for (_, c), k in zip(maps, steps, strict=True)], 0))


def surrogate_optimum(lsq, steps) -> np.ndarray:
    """argmin Σ_i K_i F_i: the objective FedAvg optimises as η → 0 when the K_i differ (FedNova paper, Thm 1)."""
    h = sum(k * a.T @ a / len(b) for (a, b), k in zip(lsq.clients, steps, strict=True))
    r = sum(k * a.T @ b / len(b) for (a, b), k in zip(lsq.clients, steps, strict=True))
    return np.linalg.solve(h, r)


@pytest.fixture(scope="module")
def federation():
    lsq = kit.least_squares(UNEQUAL)
    plan = work_of(UNEQUAL)
    steps = [plan.steps(1, i) for i in range(5)]
    assert len(set(steps)) > 2  # really unequal
    return lsq, steps


def test_fedavg_converges_to_the_k_weighted_fixed_point_not_to_x_star(federation):
    lsq, steps = federation
    run = kit.run_algorithm("fedavg", {**UNEQUAL, "num-server-rounds": 250})
    fixed = fedavg_fixed_point(lsq, steps, UNEQUAL["lr"])
    assert rel(run.x, fixed) < 1e-5
    assert lsq.relative_error(run.x) > 0.1
    # as η → 0 its fixed point goes to the K-weighted surrogate optimum, not to x*
    small = fedavg_fixed_point(lsq, steps, 1e-4)
    assert rel(small, surrogate_optimum(lsq, steps)) < 1e-2 < lsq.relative_error(small)


def test_fednova_converges_to_x_star_up_to_its_client_drift(federation):
    """FedNova removes the objective inconsistency, not the client drift: its fixed point is O(η) from x* (FedAvg's
    stays O(1) away), and the suite's run reaches that numpy fixed point."""
    lsq, steps = federation
    lr = 0.0125
    cfg = {**UNEQUAL, "lr": lr, "num-server-rounds": 600}
    nova = kit.run_algorithm("fednova", cfg)
    assert rel(nova.x, fednova_fixed_point(lsq, steps, lr)) < 1e-4
    # FedAvg's run ends at its own numpy fixed point (the test above), which is O(1) from x* at this η too
    assert lsq.relative_error(nova.x) < 0.015 and lsq.relative_error(fedavg_fixed_point(lsq, steps, lr)) > 0.1
    errors = [lsq.relative_error(fednova_fixed_point(lsq, steps, eta)) for eta in (0.02, 0.01, 0.005)]
    assert errors[0] / errors[1] == pytest.approx(2, rel=0.15) and errors[1] / errors[2] == pytest.approx(2, rel=0.15)


DRIFT_FREE = [
    ("scaffold", {}),
    ("feddyn", {"feddyn-alpha": 0.3}),
    ("fedadmm", {"fedadmm-rho": 0.3}),
    ("fedspeed", {"fedspeed-rho": 0.0, "fedspeed-mu": 0.3}),
    ("losac", {"local-batches": "blocks", "losac-blocks": 1}),  # full block gradients: LoSAC's exact table
    ("mimesvrg", {}),  # at x*, each client's direction g(x) − g(x^t) + c is zero whatever its K_i
]


# The main suite runs FedDyn and LoSAC with K_i fixed per client and SCAFFOLD with K_i redrawn each round (FedADMM
# and FedSpeed with ρ = 0 reach x* with equal K_i there: tests/test_drift_family.py); the rest is slow.
MAIN = {("feddyn", "uniform"), ("losac", "uniform"), ("scaffold", "per-round")}


@pytest.mark.parametrize(
    "algorithm,extra,mode",
    [(a, extra, mode) if (a, mode) in MAIN else pytest.param(a, extra, mode, marks=pytest.mark.slow)
     for mode in ("uniform", "per-round") for a, extra in DRIFT_FREE],
)  # fmt: skip
def test_drift_free_methods_still_reach_x_star_with_unequal_k_i(algorithm, extra, mode):
    run = kit.run_algorithm(algorithm, {**UNEQUAL, "local-work": mode, "num-server-rounds": 250, **extra})
    assert kit.least_squares(UNEQUAL).relative_error(run.x) < 1e-5


# ---- under Ray: the same K_i, the same numbers -----------------------------------------------------------------------
# Slow: the main suite's short version is tests/test_flwr_run.py::test_many_partitions_on_two_supernodes_…[feddyn-disk],
# which runs with per-round K_i under Ray against the in-process run.
@pytest.mark.slow
def test_per_round_work_under_ray_equals_the_inprocess_run(tmp_path, monkeypatch):
    """The K_i travel in the fit config whatever carries it: a `flwr run` (Ray) of SCAFFOLD with per-round K_i ends
    where the in-process run ends, and its rows show the same K_i."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    cfg = {"dataset": "synthetic-lsq", "algorithm": "scaffold", "num-clients": 4, "clients-per-round": 3,
           "num-server-rounds": 3, "local-work": "per-round", "local-steps-min": 1, "local-steps": 6,
           "batch-size": 10, "lr": 0.02, "run-name": "unequal"}  # fmt: skip
    try:
        folder = launch.run({**cfg, "out-dir": str(tmp_path)}, quiet=True)
    finally:
        assert not tagged_processes(env=SESSION), "simulation.run left processes of its run running"
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    seen = StepsSeen()
    strategy = run_inprocess(cfg, observers=[seen])
    assert rows[-1]["relative_error"] == pytest.approx(strategy.plan.evaluate(strategy.x)["relative_error"], rel=1e-6)
    for row in rows[1:]:
        ks = list(seen.steps[row["round"]].values())
        assert (row["steps_min"], row["steps_max"]) == (min(ks), max(ks))
