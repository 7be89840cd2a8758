"""Drop-outs, stragglers under a round deadline and client availability (docs/running/systems.md): the keys and their
refusals (client-level DP included), the seeded draws, the rows that show them, the numbers untouched when they are
off, and the state invariants and fixed points of the least-squares federation under them. In process only."""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.guard import RunAborted
from fedsuite.server.sampling import Sampler
from fedsuite.systems import STEPS_KEY, SystemModel
from fedsuite.systems.availability import Availability
from simulation.run import main as run_main
from tests.test_unequal_work import StepsSeen, assert_refused, fedavg_fixed_point, rel

# every system key at its default, set explicitly
DEFAULTS = {"dropout-rate": 0.0, "client-speed": "equal", "speed-spread": 1.0, "round-deadline": 0,
            "deadline-policy": "partial", "availability": "always", "availability-p-off": 0.2,
            "availability-p-on": 0.5, "availability-period": 10, "availability-fraction": 0.5}  # fmt: skip
# the least-squares federation, with the run guard off: a round may lose most of its cohort
LSQ = {**kit.LSQ, "min-replies": 0.0, "eval-every": 100000}
DROPOUTS = {"dropout-rate": 0.3}
MARKOV = {"availability": "markov", "availability-p-off": 0.2, "availability-p-on": 0.6}
SLOW = {"client-speed": "uniform", "speed-spread": 8.0, "round-deadline": 6}  # K = 10 planned


def model_of(run_config: dict) -> SystemModel:
    return SystemModel.from_run_config(resolve(run_config))


class Seen(StepsSeen):
    """The replies' partitions and K_i by round, and the rows recorded."""

    def trained(self) -> list[dict]:
        return [row for row in self.rows if row["round"] > 0]


# ---- the keys ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "keys,message",
    [
        ({"dropout-rate": 1.0}, "dropout-rate=1.0: must be in [0, 1)"),
        ({"dropout-rate": -0.1}, "dropout-rate=-0.1: must be in [0, 1)"),
        ({"round-deadline": -1}, "round-deadline=-1: must be >= 0"),
        ({"speed-spread": 0.5}, "speed-spread=0.5: must be >= 1"),
        ({"client-speed": "random"}, "client-speed='random': allowed values are equal, uniform"),
        ({"deadline-policy": "wait"}, "deadline-policy='wait': allowed values are partial, drop"),
        ({"round-deadline": 5, "local-steps": 0}, "round-deadline=5 is counted in local steps, but local-steps=0"),
        ({"round-deadline": 5, "local-steps": 10, "deadline-policy": "drop"},
         "round-deadline=5 with deadline-policy='drop': no client can finish its local steps in time"),
        ({"round-deadline": 20, "local-steps": 10, "deadline-policy": "drop", "client-speed": "uniform",
          "speed-spread": 100.0, "num-clients": 3, "clients-per-round": 3, "seed": 1},
         "round-deadline=20 with deadline-policy='drop': no client can finish"),
        ({"speed-spread": 2.0}, "speed-spread=2 is read only with client-speed='uniform'"),
        ({"client-speed": "uniform", "speed-spread": 2.0},
         "client-speed='uniform' is read only with a round deadline: set round-deadline > 0"),
        ({"deadline-policy": "drop", "local-steps": 5},
         "deadline-policy='drop' is read only with a round deadline: set round-deadline > 0"),
        ({"availability": "sometimes"}, "availability='sometimes': allowed values are always, markov, cycle"),
        ({"availability": "markov", "availability-p-on": 0.0}, "availability-p-on=0.0: must be in (0, 1]"),
        ({"availability": "markov", "availability-p-off": 1.5}, "availability-p-off=1.5: must be in (0, 1]"),
        ({"availability": "cycle", "availability-fraction": 0.0}, "availability-fraction=0.0: must be in (0, 1]"),
        ({"availability": "cycle", "availability-period": 0}, "availability-period=0: must be >= 1"),
        ({"availability": "markov", "availability-p-off": 1.0, "availability-p-on": 0.05, "num-clients": 3,
          "clients-per-round": 3, "num-server-rounds": 50},
         "availability='markov' leaves no client available in round"),
        ({"availability": "cycle", "availability-period": 10, "availability-fraction": 0.1, "num-clients": 1,
          "clients-per-round": 1}, "availability='cycle' leaves no client available in round"),
    ],
)  # fmt: skip
def test_a_bad_system_setting_is_refused_in_one_line_naming_the_key(keys, message):
    assert_refused(keys, message)


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"dp": "server", **MARKOV}, "dp='server' with availability='markov': the accountant's amplification"),
        ({"dp": "clients", "availability": "cycle"}, "dp='clients' with availability='cycle'"),
        ({"dp": "clients", "dropout-rate": 0.1}, "dp='clients' with dropout-rate=0.1: a dropped client's noise share"),
        ({"dp": "clients", "round-deadline": 20, "deadline-policy": "drop"},
         "dp='clients' with deadline-policy='drop': a late client's noise share"),
    ],
)  # fmt: skip
def test_client_level_dp_refuses_the_system_models_it_cannot_account_for(keys, message):
    with pytest.raises(ConfigError) as caught:
        resolve({"local-steps": 10, **keys})
    lines = str(caught.value).splitlines()[1:]
    assert any(line.strip().startswith(message) for line in lines), lines


def test_what_client_level_dp_can_account_for_is_accepted():
    resolve({"dp": "server", "local-steps": 10, **DROPOUTS, **SLOW, "round-deadline": 20, "deadline-policy": "drop"})
    resolve({"dp": "clients", "local-steps": 10, **SLOW})  # partial: every sampled client still adds its share


def test_simulation_run_refuses_it_with_exit_code_2_before_any_work(capsys):
    assert run_main(["--check", "-c", "round-deadline=5 local-steps=0"]) == 2
    assert "round-deadline=5 is counted in local steps" in capsys.readouterr().err


# ---- the seeded draws ----------------------------------------------------------------------------------------------
def test_drop_outs_speeds_and_availability_are_pure_functions_of_the_seed():
    cfg = {**LSQ, "num-clients": 200, "clients-per-round": 10, **DROPOUTS, **SLOW, **MARKOV}
    a, b, other = model_of(cfg), model_of(cfg), model_of({**cfg, "seed": 1})
    drops = np.array([[a.dropouts.dropped(t, i) for i in range(200)] for t in range(1, 21)])
    assert drops.mean() == pytest.approx(0.3, abs=0.03)
    assert (drops == [[b.dropouts.dropped(t, i) for i in range(200)] for t in range(1, 21)]).all()
    assert (drops != [[other.dropouts.dropped(t, i) for i in range(200)] for t in range(1, 21)]).any()
    speeds = np.array([a.deadline.speed(i) for i in range(200)])
    assert speeds.min() >= 1 / 8 and speeds.max() <= 1  # log-uniform on [1/8, 1]:
    assert np.log(speeds).mean() == pytest.approx(-np.log(8) / 2, rel=0.15)
    assert [b.deadline.speed(i) for i in range(200)] == list(speeds)
    assert [other.deadline.speed(i) for i in range(200)] != list(speeds)
    # markov: each client starts from the chain's stationary distribution and stays there
    on = np.array([a.availability.mask(t) for t in range(1, 41)])
    assert on.mean() == pytest.approx(0.6 / 0.8, abs=0.03)
    assert (on == [b.availability.mask(t) for t in range(1, 41)]).all()
    assert (on == [a.availability.mask(t) for t in reversed(range(1, 41))][::-1]).all()  # any order of asking
    assert (on != [other.availability.mask(t) for t in range(1, 41)]).any()
    switched_off = (on[:-1] & ~on[1:]).sum() / on[:-1].sum()
    assert switched_off == pytest.approx(0.2, abs=0.03)


def test_a_cycle_gives_each_client_its_share_of_every_period():
    model = Availability("cycle", 50, period=4, fraction=0.5, seed=3)
    on = np.array([model.mask(t) for t in range(1, 13)])
    assert (on.sum(axis=0) == 6).all()  # 2 of every 4 rounds, for every client
    assert (on[:4] == on[4:8]).all() and len({tuple(on[:4, i]) for i in range(50)}) == 4  # phases differ


def test_the_cohort_is_drawn_from_the_available_clients_only():
    cfg = resolve({**LSQ, "num-clients": 30, "clients-per-round": 12, **MARKOV})
    sampler = Sampler.of_run(cfg)
    for t in range(1, 30):
        available = set(sampler.availability.clients(t).tolist())
        cohort = sampler.cohort(t)
        assert set(cohort) <= available and len(cohort) == min(12, len(available))
    poisson = Sampler.of_run(resolve({**LSQ, "num-clients": 30, "sampling": "bernoulli", "participation": 0.5,
                                      **MARKOV}))  # fmt: skip
    plain = Sampler.of_run(resolve({**LSQ, "num-clients": 30, "sampling": "bernoulli", "participation": 0.5}))
    for t in range(1, 30):  # each available client keeps the coin it has without the model
        kept = set(plain.cohort(t)) & set(poisson.availability.clients(t).tolist())
        assert not kept or set(poisson.cohort(t)) == kept


def test_availability_always_leaves_every_cohort_as_it_was():
    cfg = resolve({**LSQ, "num-clients": 30, "clients-per-round": 7})
    explicit = Sampler.of_run(resolve({**LSQ, "num-clients": 30, "clients-per-round": 7, **DEFAULTS}))
    plain = Sampler(30, "fixed", 7, seed=cfg.seed)
    assert explicit == plain and explicit.availability is None
    assert all(explicit.cohort(t) == plain.cohort(t) for t in range(1, 50))


# ---- off: nothing changes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "feddyn"])
def test_every_system_key_at_its_default_is_bit_identical_to_not_setting_it(algorithm):
    base = {**kit.PARTIAL, "num-server-rounds": 3}
    plain = kit.run_algorithm(algorithm, base)
    explicit = kit.run_algorithm(algorithm, {**base, **DEFAULTS})
    assert kit.identical(plain.x, explicit.x)
    for a, b in zip(plain.rounds, explicit.rounds, strict=True):
        assert kit.identical(a.x, b.x)
        assert set(a.row) == set(b.row)
        assert not {"dropped", "late", "unavailable", "steps_min"} & set(b.row)
    model = model_of({**base, **DEFAULTS})
    assert not model.on and model.fit_config(1, 0) == {} and model.absent(1, range(6)) == {}


def test_a_deadline_every_client_meets_is_bit_identical_to_none():
    """Partial policy, equal speeds, D >= K: every client is sent K_i = local-steps, and takes what it took."""
    base = {**kit.PARTIAL, "num-server-rounds": 3}
    plain = kit.run_algorithm("scaffold", base)
    met = kit.run_algorithm("scaffold", {**base, "round-deadline": base["local-steps"]})
    assert kit.identical(plain.x, met.x)
    assert model_of({**base, "round-deadline": 3}).fit_config(1, 0) == {STEPS_KEY: 3}


# ---- drop-outs in a run --------------------------------------------------------------------------------------------
def test_a_dropped_client_gets_no_instruction_and_the_rows_count_it():
    cfg = {**LSQ, **DROPOUTS, "num-server-rounds": 8, "algorithm": "scaffold"}
    seen = Seen()
    run_inprocess(cfg, observers=[seen])
    model = model_of(cfg)
    assert len(seen.trained()) == 8
    for row in seen.trained():
        t = row["round"]
        dropped = {i for i in range(5) if model.dropouts.dropped(t, i)}
        assert row["dropped"] == len(dropped) and row["failures"] == len(dropped) and row["cohort"] == 5
        assert set(seen.steps.get(t, {})) == set(range(5)) - dropped
        assert "late" not in row and "unavailable" not in row and "steps_min" not in row
    assert sum(row["dropped"] for row in seen.trained()) > 0


def test_a_round_that_loses_its_whole_cohort_is_judged_by_the_run_guard():
    cfg = {**LSQ, "dropout-rate": 0.9, "num-server-rounds": 6, "algorithm": "fedavg"}
    everyone_gone = next(t for t in range(1, 7) if all(model_of(cfg).dropouts.dropped(t, i) for i in range(5)))
    seen = Seen()
    run_inprocess(cfg, observers=[seen])  # min-replies=0: the run goes on, the model unchanged
    row = next(r for r in seen.rows if r["round"] == everyone_gone)
    assert (row["replies"], row["dropped"], row["failures"]) == (0, 5, 5)
    with pytest.raises(RunAborted, match=r"[0-2] valid replies from a cohort of 5, min-replies=0\.5 needs 3"):
        run_inprocess({**cfg, "min-replies": 0.5, "dropout-rate": 0.6})


def test_a_resumed_run_sees_the_same_drop_outs_availability_and_deadline(tmp_path):
    keys = {**DROPOUTS, **MARKOV, "client-speed": "uniform", "speed-spread": 3.0, "round-deadline": 3,
            "min-replies": 0.0}  # fmt: skip
    kit.check_checkpoint_round_trip("scaffold", tmp_path, keys, stop_after=2, rounds=4)


# ---- the deadline --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy,deadline", [("partial", 6), ("drop", 14)])
def test_each_client_takes_the_steps_that_fit_or_is_late(policy, deadline):
    cfg = {**LSQ, **SLOW, "round-deadline": deadline, "deadline-policy": policy, "num-server-rounds": 3,
           "algorithm": "fedavg"}  # fmt: skip
    seen = Seen()
    run_inprocess(cfg, observers=[seen])
    model = model_of(cfg)
    budgets = [model.deadline.budget(i) for i in range(5)]
    assert min(budgets) < 10 <= max(budgets) or policy == "partial"  # some clients are late, some are not
    for row in seen.trained():
        took = seen.steps[row["round"]]
        if policy == "partial":
            assert took == {i: max(1, min(10, budgets[i])) for i in range(5)}
        else:
            assert took == {i: 10 for i in range(5) if budgets[i] >= 10} and row["late"] == 5 - len(took)
        assert (row["steps_min"], row["steps_max"]) == (min(took.values()), max(took.values()))
    if policy == "partial":
        assert "late" not in seen.rows[-1]


# ---- least squares: state invariants and fixed points -------------------------------------------------------------
# client state is stored as float32: the invariants hold to its precision
def c_is_the_mean_of_the_client_c_i(strategy):
    c_i = [kit.client_vector(strategy, pid, "c_i") for pid in range(strategy.rule.num_clients)]
    assert np.abs(strategy.rule.c - np.mean(c_i, axis=0)).max() < 1e-6


def h_is_the_mean_of_the_client_duals(strategy):
    alpha = float(strategy.plan.run_config["feddyn-alpha"])
    duals = [-kit.client_vector(strategy, pid, "dual") / alpha for pid in range(strategy.rule.num_clients)]
    assert np.abs(strategy.rule.h_sum / strategy.rule.num_clients - np.mean(duals, axis=0)).max() < 1e-6


def test_a_dropped_client_keeps_its_state_and_scaffold_c_stays_the_mean_of_the_c_i():
    c_i, accepted = {}, {}

    def record(strategy, server_round):
        c_i[server_round] = [kit.client_vector(strategy, pid, "c_i") for pid in range(5)]
        accepted[server_round] = dict(strategy.accepted)

    cfg = {**LSQ, **DROPOUTS, "num-server-rounds": 12}
    kit.run_algorithm("scaffold", cfg, invariants=[c_is_the_mean_of_the_client_c_i, record])
    model, unchanged = model_of(cfg), 0
    for t in range(2, 13):
        for pid in range(5):
            if model.dropouts.dropped(t, pid):
                assert accepted[t].get(pid, 0) < t  # the server accepted nothing from it this round
                assert kit.identical(c_i[t][pid], c_i[t - 1][pid])
                unchanged += 1
            else:
                assert accepted[t][pid] == t and not kit.identical(c_i[t][pid], c_i[t - 1][pid])
    assert unchanged > 5


DRIFT_FREE = [("scaffold", {}, c_is_the_mean_of_the_client_c_i),
              ("feddyn", {"feddyn-alpha": 0.3}, h_is_the_mean_of_the_client_duals)]  # fmt: skip


# The main suite runs SCAFFOLD under drop-outs and FedDyn under Markov availability; the other two pairs are slow.
MAIN_SYSTEMS = {("scaffold", "dropouts"), ("feddyn", "markov")}


@pytest.mark.parametrize(
    "algorithm,extra,invariant,system",
    [pytest.param(a, extra, invariant, system, id=f"{a}-{name}",
                  marks=() if (a, name) in MAIN_SYSTEMS else pytest.mark.slow)
     for a, extra, invariant in DRIFT_FREE for name, system in (("dropouts", DROPOUTS), ("markov", MARKOV))],
)  # fmt: skip
def test_drift_free_methods_reach_x_star_under_drop_outs_and_availability(algorithm, extra, invariant, system):
    cfg = {**LSQ, **system, **extra, "num-server-rounds": 300}
    run = kit.run_algorithm(algorithm, cfg, invariants=[invariant])
    assert kit.least_squares(LSQ).relative_error(run.x) < 1e-5
    rows = [r.row for r in run.rounds]
    column = "dropped" if system is DROPOUTS else "unavailable"
    assert any(row[column] > 0 for row in rows)


def test_under_a_partial_deadline_fedavg_moves_with_the_k_i_and_scaffold_reaches_x_star():
    cfg = {**LSQ, **SLOW, "num-server-rounds": 250}
    model = model_of(cfg)
    steps = [model.fit_config(1, i)[STEPS_KEY] for i in range(5)]
    assert len(set(steps)) > 2  # really unequal
    lsq = kit.least_squares(LSQ)
    fedavg = kit.run_algorithm("fedavg", cfg)
    assert rel(fedavg.x, fedavg_fixed_point(lsq, steps, LSQ["lr"])) < 1e-5
    assert rel(fedavg.x, fedavg_fixed_point(lsq, [10] * 5, LSQ["lr"])) > 1e-3  # not where equal K leads
    scaffold = kit.run_algorithm("scaffold", cfg, invariants=[c_is_the_mean_of_the_client_c_i])
    assert lsq.relative_error(scaffold.x) < 1e-5


def test_secure_aggregation_refuses_a_partial_deadline_where_the_server_divides_by_k_i():
    keys = {"algorithm": "fednova", "secagg": True, "client-mapping": "fixed", "local-steps": 10, **SLOW}
    with pytest.raises(ConfigError, match="secagg=true with round-deadline > 0 and deadline-policy='partial'"):
        resolve(keys)
    resolve({**keys, "algorithm": "fedavg"})  # a mean of the Δ_i needs only their sum


def test_cost_benchmark_runs_the_same_work_with_the_models_on(capsys):
    """simulation.benchmarks.systems: with every system model on in a setting that changes no work, the final model
    is byte-equal to the plain run's, and the ratio is printed last."""
    from simulation.benchmarks import systems as benchmark

    assert benchmark.main(["--model", "logreg", "--rounds", "4", "--options", "systems"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "systems: steady round" in lines[-2] and lines[-2].endswith("same_model yes")
    name, value = lines[-1].split()
    assert name == "systems_ratio" and float(value) > 0


def test_the_run_plot_shows_what_the_system_models_did(tmp_path):
    """accuracy.png gains a panel with the K_i band and the dropped / unavailable counts when a system model is on,
    and is unchanged without one."""
    from matplotlib.image import imread

    widths = {}
    for name, keys in (("plain", {}), ("systems", {"local-work": "uniform", "local-steps-min": 1, "dropout-rate": 0.3,
                                                   "availability": "markov"})):  # fmt: skip
        run_inprocess({**LSQ, "num-server-rounds": 3, "eval-every": 1, **keys, "out-dir": str(tmp_path),
                       "run-name": name}, record=True)  # fmt: skip
        widths[name] = imread(tmp_path / name / "accuracy.png").shape[1]
    assert widths["systems"] == pytest.approx(2 * widths["plain"], rel=0.05)


def test_cost_benchmark_refuses_a_ratio_over_different_work(monkeypatch, capsys):
    """An option that changes the work (here: fewer steps) gives a different final model: no ratio, exit code 1."""
    from simulation.benchmarks import systems as benchmark

    monkeypatch.setitem(benchmark.OPTIONS, "fewer", {"local-steps": 5})
    assert benchmark.main(["--model", "logreg", "--rounds", "4", "--options", "fewer"]) == 1
    out, err = capsys.readouterr()
    assert "fewer: steady round" in out and "same_model no" in out and "_ratio" not in out
    assert err.count("\n") == 1 and "fewer: the final model differs" in err
