"""simulation.tune --budget N: every algorithm gets N distinct points (its whole grid when that is smaller), a repeated
TPE proposal is told its known score and runs nothing, a sampler that keeps repeating falls back to a seeded order,
the same command gives the same points, the plan and tune.md say what each algorithm got, and bad budgets stop
before any run. The searches use a runner that scores points by a formula, or the fake engine of test_tune (no
training)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import optuna
import pytest

from fedsuite.config.tunable import LogRange, space_size
from fedsuite.registry import known as registry
from fedsuite.registry.known import ALGORITHMS
from simulation import tune
from simulation.experiment import engines
from simulation.tuning import budget
from simulation.tuning.space import grid_points
from tests.test_tune import SHARED, FakeEngine, read_csv, val_peaks_at_small_lr_test_at_large


class Runner:
    """A search's runner without runs: scores each point by a formula (best near lr = 0.05, alpha = 0.2) and records
    every point it was asked to run."""

    def __init__(self):
        self.ran: list[tuple] = []

    def __call__(self, setting, algorithm, points, first_number):
        self.ran += points
        return [tune.Trial(n, algorithm, p, [0], ["completed"], [score(p)]) for n, p in enumerate(points, first_number)]


def score(point) -> float:
    values = dict(point)
    return 1 - abs(math.log(values["lr"] / 0.05)) - abs(values.get("fedcm-alpha", 0.2) - 0.2)


def setting(tmp_path: Path, parallel: int = 1) -> tune.Setting:
    return tune.Setting({}, [0], tmp_path, "inprocess", parallel, "val_accuracy", 3, True)


@pytest.fixture
def fake(monkeypatch):
    """Installs test_tune's fake engine: runs write results folders with chosen validation accuracies."""

    def install(accuracies) -> FakeEngine:
        engine = FakeEngine(accuracies)
        monkeypatch.setattr(engines, "launch", engine)
        return engine

    return install


SMALL = {"lr": (0.01, 0.05, 0.5), "fedcm-alpha": (0.1, 0.5)}  # 6 points: TPE repeats itself quickly


# --- distinct points -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_repeated_proposal_is_not_a_trial_and_runs_nothing(tmp_path, parallel):
    space = tune.spaces_for(["fedcm"], {})["fedcm"]
    runner = Runner()
    trials = budget.budget_search(setting(tmp_path, parallel), "fedcm", space, 15, 0, run=runner)
    points = [t.point for t in trials]
    assert len(trials) == 15 and len(set(points)) == 15 and [t.number for t in trials] == list(range(1, 16))
    assert sorted(runner.ran) == sorted(points)  # every point ran once; a repeat ran nothing
    assert sum(t.repeats for t in trials) > 0  # TPE did repeat itself: those proposals cost no budget
    assert set(points) <= set(grid_points(space)) and {t.origin for t in trials} <= {budget.TPE, budget.seeded_origin()}


def test_the_old_trials_count_repeats_where_the_budget_counts_distinct_points(tmp_path):
    old = tune.optuna_search(setting(tmp_path), "fedcm", SMALL, 5, 0, run=Runner())
    assert len(old) == 5 and len({t.point for t in old}) < 5  # what a reviewer rejects: fewer distinct points
    new = budget.budget_search(setting(tmp_path), "fedcm", SMALL, 5, 0, run=Runner())
    assert len({t.point for t in new}) == 5


def test_a_repeated_proposal_tells_optuna_the_known_score(tmp_path, monkeypatch):
    studies = []
    create = optuna.create_study
    monkeypatch.setattr(optuna, "create_study", lambda **kw: studies.append(create(**kw)) or studies[-1])
    trials = budget.budget_search(setting(tmp_path), "fedcm", SMALL, 5, 0, run=Runner())
    told = studies[0].trials
    assert len(told) == 5 + sum(t.repeats for t in trials) > 5
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in told)
    for frozen in told:  # every proposal, a repeat or not, carries the score of the point it named
        assert frozen.value == pytest.approx(score(tuple(frozen.params.items())))


class Repeating(optuna.samplers.BaseSampler):
    """A sampler that always proposes the first value of every key: only the seeded fallback gets anywhere."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        return distribution.choices[0]


def test_a_sampler_that_keeps_repeating_falls_back_to_a_seeded_order(tmp_path, monkeypatch):
    monkeypatch.setattr(optuna.samplers, "TPESampler", lambda seed: Repeating())
    runs = []
    for seed in (0, 0, 1):
        runner = Runner()
        trials = budget.budget_search(setting(tmp_path), "fedcm", SMALL, 5, seed, run=runner)
        assert len({t.point for t in trials}) == 5 and len(runner.ran) == 5
        assert trials[0].origin == budget.TPE and trials[0].repeats == budget.MAX_REPEATS * 4
        assert {t.origin for t in trials[1:]} == {f"seeded order after {budget.MAX_REPEATS} repeated proposals"}
        runs.append([t.point for t in trials])
    assert runs[0] == runs[1] != runs[2]  # the fallback order is drawn by the sampler seed


def test_a_space_no_larger_than_the_budget_is_searched_whole_without_optuna(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "optuna", None)  # the grid needs no Optuna
    space = tune.spaces_for(["fedavg"], {})["fedavg"]
    runner = Runner()
    trials = budget.budget_search(setting(tmp_path), "fedavg", space, 8, 0, run=runner)
    assert [t.point for t in trials] == grid_points(space) == runner.ran
    assert {t.origin for t in trials} == {budget.GRID} and budget.distinct_points(5, 8) == 5


def test_space_size_counts_a_log_ranges_grid_points():
    assert space_size({"lr": LogRange(0.005, 0.5)}) == 5
    assert space_size({"lr": LogRange(0.005, 0.5, points=3), "x": (1, 2), "y": ("a", "b", "c")}) == 18
    assert all(space_size(ALGORITHMS[a].tunable) == len(grid_points(ALGORITHMS[a].tunable)) for a in ALGORITHMS)


# --- the command ---------------------------------------------------------------------------------------------------


def budget_args(out: Path, *extra: str) -> list[str]:
    return ["--algorithms", "fedavg,fedcm,feddyn", "-c", SHARED, "--seeds", "0,1", "--final-seeds", "none",
            "--engine", "inprocess", "--out", str(out), "--budget", "8", *extra]  # fmt: skip


def test_every_algorithm_gets_the_same_budget_of_distinct_points(tmp_path, fake):
    engine = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(budget_args(tmp_path)) == 0
    got = {}
    for algorithm in ("fedavg", "fedcm", "feddyn"):
        rows = read_csv(tmp_path / "search" / f"{algorithm}.csv")
        keys = [k for k in rows[0] if k in ALGORITHMS[algorithm].tunable]
        got[algorithm] = {tuple(r[k] for k in keys) for r in rows}
        assert len(got[algorithm]) == len(rows)  # one row per distinct point
        assert {r["proposed_by"] for r in rows} <= {"grid", "TPE", budget.seeded_origin()}
    assert {a: len(p) for a, p in got.items()} == {"fedavg": 5, "fedcm": 8, "feddyn": 8}  # fedavg: its whole grid
    assert len(engine.launches) == (5 + 8 + 8) * 2  # every distinct point once per seed, nothing more
    text = (tmp_path / "tune.md").read_text()
    assert "| distinct points tried |" in text and "| 5 of 5 (the full grid) |" in text
    assert text.count("| 8 of 20 |") == 1 and text.count("| 8 of 15 |") == 1
    assert "--search optuna --budget 8 --sampler-seed 0" in text  # the reproduce line
    assert "repeated proposals" in (tmp_path / "search" / "fedcm.md").read_text()


def test_the_same_command_gives_the_same_points_and_resumes(tmp_path, fake):
    fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(budget_args(tmp_path / "a")) == 0
    assert tune.main(budget_args(tmp_path / "b")) == 0
    assert tune.main(budget_args(tmp_path / "c", "--sampler-seed", "1")) == 0
    table = {d: (tmp_path / d / "search" / "fedcm.csv").read_text() for d in "abc"}
    assert table["a"] == table["b"] != table["c"]
    rerun = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(budget_args(tmp_path / "a")) == 0 and rerun.launches == []
    assert (tmp_path / "a" / "search" / "fedcm.csv").read_text() == table["a"]


def test_the_final_runs_are_compared_with_the_baseline_seed_by_seed(tmp_path, fake):
    fake(val_peaks_at_small_lr_test_at_large)
    argv = [*budget_args(tmp_path), "--baseline", "fedcm"]
    argv[argv.index("--final-seeds") + 1] = "10,11"
    assert tune.main(argv) == 0
    paired = read_csv(tmp_path / "final" / "sweep-paired.csv")
    assert sorted((r["algorithm"], r["baseline"], r["pairs"]) for r in paired) == [
        ("fedavg", "fedcm", "2"),
        ("feddyn", "fedcm", "2"),
    ]
    text = (tmp_path / "tune.md").read_text()
    assert "Δ vs fedcm" in text and "--baseline fedcm" in text  # the table, and the reproduce line


def test_dry_run_and_list_say_what_each_algorithm_gets(tmp_path, capsys):
    assert tune.main([*budget_args(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "tune: optuna search of 8 distinct points, 42 search runs (2 seeds each)" in out
    assert "  fedavg: 5 distinct points of a space of 5 (the full grid), over lr" in out
    assert "  fedcm: 8 distinct points of a space of 20 (proposed by TPE), over lr, fedcm-alpha" in out
    assert "  feddyn: 8 distinct points of a space of 15 (proposed by TPE), over lr, feddyn-alpha" in out
    argv = [a for a in budget_args(tmp_path) if a not in ("--budget", "8")]
    assert tune.main([*argv, "--dry-run"]) == 0
    assert "  fedcm: 20 trials, the full grid of 20 points, over lr, fedcm-alpha" in capsys.readouterr().out
    assert tune.main([*argv, "--search", "optuna", "--trials", "4", "--dry-run"]) == 0
    assert "TPE may repeat a point, so the distinct points are not fixed" in capsys.readouterr().out
    assert tune.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "| algorithm | points |" in out and "| `fedavg` | 5 |" in out and "| `mofedsam` | 20 |" in out


@pytest.fixture
def untuned():
    """A plug-in copy of FedAvg that declares no search space."""
    registry.register(dataclasses.replace(ALGORITHMS["fedavg"], name="fedavg-untuned", tunable={}))
    yield "fedavg-untuned"
    registry.ALGORITHMS.unregister("fedavg-untuned")


@pytest.mark.parametrize(
    "extra, message",
    [(["--budget", "0"], "--budget 0: give N >= 1"),
     (["--budget", "21"], "--budget 21: larger than every algorithm's space (fedcm has the most, 20 points)"),
     (["--budget", "3", "--trials", "3"], "--budget 3 and --trials 3: give one"),
     (["--budget", "3", "--search", "grid"], "--budget 3: a grid search tries every point"),
     (["--search", "optuna"], "give --budget N (distinct points per algorithm) or --trials N"),
     (["--budget", "3", "--space", "fedcm:fedcm-alpha=0.1,2"], "fedcm-alpha"),
     (["--budget", "3", "--baseline", "scaffold"], "--baseline scaffold: not among --algorithms (fedavg, fedcm)")],
)  # fmt: skip
def test_bad_budgets_stop_before_any_run(tmp_path, fake, capsys, extra, message):
    engine = fake(val_peaks_at_small_lr_test_at_large)
    argv = ["--algorithms", "fedavg,fedcm", "-c", SHARED, "--engine", "inprocess", "--out", str(tmp_path), *extra]
    assert tune.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert engine.launches == []


def test_an_empty_space_stops_before_any_run(tmp_path, fake, capsys, untuned):
    engine = fake(val_peaks_at_small_lr_test_at_large)
    argv = ["--algorithms", untuned, "-c", SHARED, "--budget", "2", "--engine", "inprocess", "--out", str(tmp_path)]
    assert tune.main(argv) == 2
    assert "declares no tunable keys" in capsys.readouterr().err and engine.launches == []


# --- the declared spaces -------------------------------------------------------------------------------------------

MAIN_KNOBS = {
    "fedsam": {"sam-rho"}, "mofedsam": {"fedcm-alpha", "sam-rho"}, "fedspeed": {"fedspeed-rho", "fedspeed-mu"},
    "fedsmoo": {"fedsmoo-rho", "fedsmoo-mu"}, "fedgamma": {"fedgamma-rho"}, "feddyn": {"feddyn-alpha"},
    "fedcm": {"fedcm-alpha"}, "fedmim": {"fedmim-alphas", "fedmim-betas"}, "fedprox": {"prox-mu"},
    "fedavgm": {"fedavgm-beta"}, "fedexp": {"fedexp-eps"}, "localadam": {"adam-eps"}, "fadamet": {"adam-eps"},
    "fadamgt": {"adam-eps"}, "fedadam": {"fedopt-lr"}, "fedlada": {"fedlada-alpha"},
}  # fmt: skip


def test_every_space_covers_the_main_knobs_its_paper_tunes_and_stays_small():
    for name in ALGORITHMS.built_in:
        space = ALGORITHMS[name].tunable
        if name in MAIN_KNOBS:
            assert set(space) == {"lr", *MAIN_KNOBS[name]}, name
        assert space_size(space) <= 25, name
        if len(space) == 3:  # two values besides lr: two of each, so the grid stays at 20 points
            assert space_size(space) == 20, name


def test_the_three_key_spaces_pass_the_algorithms_own_checks(tmp_path):
    """Every grid point of the new spaces is a valid config (FedMIM's α/β pairs included): the plan validates them
    all before any run."""
    argv = ["--algorithms", "mofedsam,fedspeed,fedsmoo,fedmim", "--final-seeds", "none", "--out", str(tmp_path),
            "--dry-run"]  # fmt: skip
    assert tune.main(argv) == 0
