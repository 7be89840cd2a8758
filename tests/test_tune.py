"""simulation.tune: the searched space is the registry's declaration, trials are scored on the validation split only,
failed or diverged trials are never chosen, a stopped tuning resumes, the final runs use the chosen values on fresh
seeds without a validation split, tuned.toml round-trips. Most tests use a fake engine (`simulation.experiment.launch`
replaced) whose runs write results folders with chosen validation and test accuracies, so that each rule is checked
by a case where getting it wrong picks a different value."""

from __future__ import annotations

import csv
import itertools
import json
import math
import signal
import tomllib
from pathlib import Path

import pytest

from fedsuite.config import tuned
from fedsuite.config.run_config import SCHEMA, ConfigError, Key
from fedsuite.config.tunable import LogRange, grid_values, problem, rounded
from fedsuite.registry.known import ALGORITHMS
from simulation import tune
from simulation.experiment import engines
from simulation.launcher.outcome import Interrupted, RunFailed
from simulation.tuning import space as tuning_space
from simulation.tuning import trials as tuning_trials

SHARED = "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=3 targets='0.5'"
LR_GRID = LogRange(0.005, 0.5).grid()  # fedavg's declared grid: 0.005, 0.0158, 0.05, 0.158, 0.5


class FakeEngine:
    """Replaces one run: writes config.json, rounds.jsonl and summary.json as a completed run would, with validation
    and test accuracy from `accuracies(settings) -> (val, test)`, or a diverged run when it returns None."""

    def __init__(self, accuracies, stop_after: int | None = None):
        self.accuracies, self.stop_after, self.launches, self.groups = accuracies, stop_after, [], []
        self.spent = lambda settings: False  # runs that stop early on their target ε (status budget-spent)

    def __call__(self, overrides: dict, engine: str, *rest, **kwargs) -> Path:
        if self.stop_after is not None and len(self.launches) >= self.stop_after:
            raise Interrupted(signal.SIGTERM)
        self.launches.append(dict(overrides))
        self.groups.append(rest[0] if rest else kwargs.get("group"))
        folder = Path(overrides["out-dir"]) / overrides["run-name"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"run_config": overrides}))
        result = self.accuracies(overrides)
        if result is None:
            (folder / "rounds.jsonl").write_text(json.dumps({"round": 0, "accuracy": 0.5}) + "\n")
            (folder / "summary.json").write_text(json.dumps({"status": "diverged"}))
            raise RunFailed("diverged: the model is not finite", "diverged", folder)
        val, test = result
        has_val = overrides.get("validation-fraction", 0.0) > 0
        rows = [{"round": r, "accuracy": test - 0.1 / (r + 1), "round_seconds": 0.1,
                 **({"val_accuracy": val - 0.1 / (r + 1)} if has_val else {})} for r in range(4)]  # fmt: skip
        (folder / "rounds.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        status = "budget-spent" if self.spent(overrides) else "completed"
        (folder / "summary.json").write_text(json.dumps({"status": status, "rounds_completed": 3,
                                                         "final_accuracy": rows[-1]["accuracy"],
                                                         "best_accuracy": rows[-1]["accuracy"]}))  # fmt: skip
        return folder


def val_peaks_at_small_lr_test_at_large(settings: dict):
    """Validation accuracy best at lr = 0.0158, test accuracy best at lr = 0.5: a score that read the test column
    would choose 0.5."""
    distance = abs(math.log(settings["lr"] / 0.0158))
    return 0.9 - 0.1 * distance + 0.001 * settings["seed"], 0.5 + 0.05 * math.log(settings["lr"] / 0.005)


@pytest.fixture
def fake(monkeypatch):
    def install(accuracies, stop_after=None) -> FakeEngine:
        engine = FakeEngine(accuracies, stop_after)
        monkeypatch.setattr(engines, "launch", engine)
        return engine

    return install


def tune_args(out: Path, *extra: str) -> list[str]:
    """The tuning's flags, `extra` last; a list flag in `extra` replaces its default here (given twice, a list flag
    would hold both lists)."""
    defaults = {"--algorithms": "fedavg", "--seeds": "0,1", "--final-seeds": "10,11"}
    given = [item for flag, value in defaults.items() if flag not in extra for item in (flag, value)]
    return [*given, "-c", SHARED, "--engine", "inprocess", "--out", str(out), *extra]


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


# --- the space --------------------------------------------------------------------------------------------------


def test_every_algorithm_declares_a_tunable_lr_inside_the_schema():
    for name in ALGORITHMS.built_in:
        tunable = ALGORITHMS[name].tunable
        assert "lr" in tunable, name
        for key, search in tunable.items():
            assert problem(key, search, SCHEMA.get(key)) is None, (name, key)
            assert all(SCHEMA[key].check(v)[1] is None for v in grid_values(search)), (name, key)
    # the check itself refuses what leaves a range, unknown keys and empty lists
    assert "fedcm-alpha" in problem("fedcm-alpha", (0.5, 1.5), SCHEMA["fedcm-alpha"])
    assert "lr=0.1: must be in [0.5, 1]" in problem("lr", LogRange(0.1, 0.9), Key("lr", 1.0, "", low=0.5, high=1.0))
    assert "in [0, 1]" in problem("lr", LogRange(0.1, 2.0), Key("lr", 1.0, "", low=0.0, high=1.0))
    assert "not a run-config key" in problem("no-such-key", (1,), None)
    assert "non-empty" in problem("lr", (), SCHEMA["lr"])
    with pytest.raises(ValueError, match="0 < low < high"):
        LogRange(0.0, 1.0)


def test_grid_is_the_declared_one_and_space_replaces_keys():
    space = tuning_space.search_space("fedcm")
    assert space == dict(ALGORITHMS["fedcm"].tunable)
    points = tune.grid_points(space)
    assert points == [(("lr", lr), ("fedcm-alpha", a)) for lr, a in itertools.product(LR_GRID, space["fedcm-alpha"])]
    assert LR_GRID == (0.005, 0.0158, 0.05, 0.158, 0.5) and rounded(0.0158113883) == 0.0158
    replaced = tune.spaces_for(["fedavg", "fedcm"], tune.parse_space("fedcm-alpha=0.3 weight-decay=0,0.001"))
    first = (("lr", 0.005), ("fedcm-alpha", 0.3))
    assert tune.grid_points(replaced["fedcm"])[:2] == [(*first, ("weight-decay", 0)), (*first, ("weight-decay", 0.001))]
    assert replaced["fedavg"] == {"lr": LogRange(0.005, 0.5), "weight-decay": (0, 0.001)}  # fedcm-alpha: fedcm's only
    scoped = tune.spaces_for(["fedavg", "fedcm"], tune.parse_space("fedavg:lr=0.1 lr=0.01,0.02"))
    assert scoped["fedavg"] == {"lr": (0.1,)} and scoped["fedcm"]["lr"] == (0.01, 0.02)
    for text in ("lr", "lr=", ":lr=1", "lr=0.1 lr=0.2"):
        with pytest.raises(ConfigError, match="--space"):
            tune.parse_space(text)
    with pytest.raises(ConfigError, match="seed cannot be searched"):
        tune.spaces_for(["fedavg"], tune.parse_space("seed=1,2"))
    with pytest.raises(ConfigError, match="'scaffold' is not among --algorithms"):
        tune.spaces_for(["fedavg"], tune.parse_space("scaffold:lr=0.1"))
    with pytest.raises(ConfigError, match="fedcm-alpha"):
        tuning_space.search_space("fedcm", {"fedcm-alpha": (0.1, 2.0)})
    with pytest.raises(ConfigError, match="--algorithms 'nope'"):
        tuning_space.search_space("nope")


def test_a_plugin_key_tagged_not_tunable_is_refused_like_a_built_in_one(monkeypatch):
    """A plug-in's own key with tunable=False is one a tuning sets itself: searching it is refused, as for seed."""
    from fedsuite.registry import known as registry
    from fedsuite.registry.entry import Algorithm
    from fedsuite.registry.plugins import AlgorithmRegistry

    fixed = Key("fixed-horizon", 10, "a plug-in's key that a tuning must not search", low=1, tunable=False)
    searched = Key("plugin-beta", 0.5, "a plug-in's key a tuning may search", low=0.0)
    plugin = Algorithm(
        name="tagged-plugin",
        strategy="fedsuite.strategies.fedavg:FedAvg",
        client="fedsuite.clients.fedavg:FedAvgClient",
        section="plug-in (test)",
        summary="FedAvg",
        keys=(fixed, searched),
        tunable={"lr": LogRange(0.005, 0.5), "plugin-beta": (0.0, 0.5)},
    )
    plugged = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=list)
    plugged.register(plugin)
    monkeypatch.setattr(registry, "ALGORITHMS", plugged)
    assert set(tuning_space.search_space("tagged-plugin")) == {"lr", "plugin-beta"}
    with pytest.raises(ConfigError, match="fixed-horizon cannot be searched"):
        tuning_space.search_space("tagged-plugin", {"fixed-horizon": (5, 20)})


def test_list_prints_every_algorithm_and_its_keys(capsys):
    assert tune.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(f"| `{name}` | `lr` |" in out for name in ALGORITHMS.built_in)
    assert "| `fedcm` | `fedcm-alpha` | 0.05, 0.1, 0.2, 0.5 | `0.1` |" in out


# --- scoring and choosing -------------------------------------------------------------------------------------------


def test_the_score_reads_the_validation_column_never_the_test_accuracy(tmp_path, fake, capsys):
    engine = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path)) == 0
    assert tuned.read(tmp_path / "tuned.toml") == {"fedavg": {"lr": 0.0158}}  # the test column would pick 0.5
    rows = read_csv(tmp_path / "search" / "fedavg.csv")
    assert [float(r["lr"]) for r in rows] == list(LR_GRID) and [r["chosen"] for r in rows].count("True") == 1
    chosen = next(r for r in rows if r["chosen"] == "True")
    # per seed: the mean of val_accuracy over the last 3 evaluations of the fake rows (rounds 1..3)
    for seed in (0, 1):
        val = val_peaks_at_small_lr_test_at_large({"lr": 0.0158, "seed": seed})[0]
        assert float(chosen[f"seed_{seed}"]) == pytest.approx(sum(val - 0.1 / (r + 1) for r in (1, 2, 3)) / 3)
    assert float(chosen["mean_score"]) == pytest.approx((float(chosen["seed_0"]) + float(chosen["seed_1"])) / 2)
    searched = [o for o in engine.launches if o["seed"] in (0, 1)]
    assert len(searched) == 10 and all(o["validation-fraction"] == 0.1 for o in searched)
    assert "✓" in (tmp_path / "search" / "fedavg.md").read_text()


def test_federated_evaluation_scores_the_federated_validation_column(tmp_path):
    assert tune.score_column("federated") == "fed_val_accuracy"
    assert tune.score_column("both") == tune.score_column("central") == "val_accuracy"
    assert tune.score_column("central", "loss") == "val_loss"
    (tmp_path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"round": 0, "fed_val_accuracy": 0.1, "accuracy": 0.9}, {"round": 1}, {"round": 2, "fed_val_accuracy": 0.3},
        {"round": 3, "fed_val_accuracy": 0.5}, {"round": 4, "fed_val_accuracy": 0.7}]))  # fmt: skip
    assert tuning_trials.validation_score(tmp_path, "fed_val_accuracy", 3) == pytest.approx(0.5)
    assert tuning_trials.validation_score(tmp_path, "fed_val_accuracy", 10) == pytest.approx(0.5)  # round 0 is out
    with pytest.raises(ConfigError, match="no 'val_accuracy' values"):
        tuning_trials.validation_score(tmp_path, "val_accuracy", 3)


def test_a_diverged_trial_is_listed_with_its_status_and_never_chosen(tmp_path, fake):
    def diverges_at_large_lr(settings):  # the best validation score would be at lr = 0.5, but seed 1 diverges
        if settings["lr"] == 0.5 and settings["seed"] == 1:
            return None
        return 0.5 + settings["lr"], 0.5

    fake(diverges_at_large_lr)
    assert tune.main(tune_args(tmp_path)) == 0
    rows = {float(r["lr"]): r for r in read_csv(tmp_path / "search" / "fedavg.csv")}
    assert rows[0.5]["status"] == "diverged" and rows[0.5]["mean_score"] == "" and rows[0.5]["chosen"] == "False"
    assert rows[0.5]["seed_0"] != "" and rows[0.5]["seed_1"] == ""
    assert rows[0.158]["chosen"] == "True" and tuned.read(tmp_path / "tuned.toml")["fedavg"] == {"lr": 0.158}
    assert "| 5 | 0.5 | 0.9639 | – | – | diverged |  |" in (tmp_path / "search" / "fedavg.md").read_text()


def test_a_trial_that_spent_its_privacy_budget_is_scored_and_can_be_chosen(tmp_path, fake):
    """A run stopped by its target ε ended as its config asked (budget-spent): its trial is scored like a completed
    one, so with a target ε the best point is still found."""
    engine = fake(lambda settings: (0.5 + settings["lr"], 0.5))
    engine.spent = lambda settings: settings["lr"] >= 0.158 and settings["seed"] == 0
    assert tune.main(tune_args(tmp_path)) == 0
    rows = {float(r["lr"]): r for r in read_csv(tmp_path / "search" / "fedavg.csv")}
    assert rows[0.5]["status"] == "budget-spent" and rows[0.5]["mean_score"] != "" and rows[0.5]["chosen"] == "True"
    assert rows[0.05]["status"] == "completed"
    assert tuned.read(tmp_path / "tuned.toml")["fedavg"] == {"lr": 0.5}


def test_the_best_is_the_highest_accuracy_or_the_lowest_loss_first_of_equals():
    trials = [tune.Trial(n, "fedavg", (("lr", lr),), [0], ["completed"], [score])
              for n, lr, score in ((1, 0.1, 0.5), (2, 0.2, 0.7), (3, 0.3, 0.7), (4, 0.4, 0.2))]  # fmt: skip
    trials.append(tune.Trial(5, "fedavg", (("lr", 0.5),), [0], ["failed"], [None]))
    assert tune.chosen(trials).number == 2 and tune.chosen(trials, maximize=False).number == 4
    assert tune.chosen(trials[4:]) is None


def test_an_algorithm_without_a_completed_trial_gets_no_values_and_exit_1(tmp_path, fake):
    fake(lambda settings: None)
    assert tune.main(tune_args(tmp_path)) == 1
    assert tuned.read(tmp_path / "tuned.toml") == {}
    assert "none: no trial completed" in (tmp_path / "tune.md").read_text()


# --- resume, final runs ------------------------------------------------------------------------------------------


def test_a_stopped_tuning_resumes_reusing_completed_trials(tmp_path, fake):
    first = fake(val_peaks_at_small_lr_test_at_large, stop_after=3)
    assert tune.main(tune_args(tmp_path)) == 143  # SIGTERM after 3 runs
    assert len(first.launches) == 3 and not (tmp_path / "tuned.toml").exists()
    second = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path)) == 0
    assert len(second.launches) == 10 - 3 + 2  # the rest of the search, then the 2 final runs
    third = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path)) == 0 and third.launches == []


def test_final_runs_use_the_chosen_values_on_the_final_seeds_without_validation(tmp_path, fake):
    engine = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path, "-c", "validation-fraction=0.2")) == 0
    search, final = engine.launches[:10], engine.launches[10:]
    assert {o["validation-fraction"] for o in search} == {0.2} and {o["seed"] for o in search} == {0, 1}
    assert [(o["seed"], o["lr"], o["validation-fraction"]) for o in final] == [(10, 0.0158, 0.0), (11, 0.0158, 0.0)]
    assert all(Path(o["out-dir"]).parent == tmp_path / "final" / "runs" / "fedavg" for o in final)
    assert engine.groups == [f"{tmp_path.name}/search"] * 10 + [f"{tmp_path.name}/final"] * 2  # tracking groups
    row = read_csv(tmp_path / "final" / "sweep.csv")[0]
    assert (row["algorithm"], row["grid"], row["seeds"]) == ("fedavg", "lr=0.0158", "2/2")
    test = val_peaks_at_small_lr_test_at_large({"lr": 0.0158, "seed": 10})[1] - 0.1 / 4
    assert float(row["final_acc_mean"]) == pytest.approx(test)
    assert "lr=0.0158" in (tmp_path / "tune.md").read_text()


def test_final_settings_drop_the_validation_split_and_its_target_metric():
    settings = tune.final_settings({"validation-fraction": 0.2, "target-metric": "fed-val-accuracy", "lr": 0.1})
    assert settings == {"validation-fraction": 0.0, "target-metric": "fed-accuracy", "lr": 0.1}


# --- Optuna ---------------------------------------------------------------------------------------------------------


def scored_without_runs(setting, algorithm, points, first_number):
    """A runner that scores points by a formula (no runs): validation accuracy best near lr = 0.05, alpha = 0.2."""
    return [tune.Trial(n, algorithm, p, [0], ["completed"], [1 - abs(math.log(dict(p)["lr"] / 0.05))
                                                              - abs(dict(p)["fedcm-alpha"] - 0.2)])
            for n, p in enumerate(points, first_number)]  # fmt: skip


def test_optuna_with_the_same_seed_proposes_the_same_trials(tmp_path):
    setting = tune.Setting({}, [0], tmp_path, "inprocess", 2, "val_accuracy", 3, True)
    space = tuning_space.search_space("fedcm")

    def proposals(seed):
        return [t.point for t in tune.optuna_search(setting, "fedcm", space, 12, seed, run=scored_without_runs)]

    first = proposals(0)
    assert len(first) == 12 and first == proposals(0) and first != proposals(1)
    for point in first:
        lr, alpha = dict(point)["lr"], dict(point)["fedcm-alpha"]
        assert 0.005 <= lr <= 0.5 and lr == rounded(lr) and alpha in space["fedcm-alpha"]


def test_optuna_search_end_to_end_is_reproducible_and_resumes(tmp_path, fake):
    argv = ["--search", "optuna", "--trials", "4", "--final-seeds", "none"]
    first = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path / "a", *argv)) == 0
    again = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path / "b", *argv)) == 0
    assert [o["lr"] for o in first.launches] == [o["lr"] for o in again.launches] and len(first.launches) <= 8
    table = (tmp_path / "a" / "search" / "fedavg.csv").read_text()
    assert table == (tmp_path / "b" / "search" / "fedavg.csv").read_text() and len(table.splitlines()) == 5
    rerun = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path / "a", *argv)) == 0 and rerun.launches == []


# --- bad settings, tuned.toml -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [(["-c", "validation-fraction=0"], "validation-fraction=0"), (["--search", "optuna"], "--trials"),
     (["--space", "lr=-1"], "lr"), (["--algorithms", "fedavg,nope"], "nope"), (["--seeds", "0,0"], "--seeds"),
     (["-c", "lr-decay=2"], "lr-decay"), (["--final-seeds", "1,12"], "seed 1 is also a search seed")],
)  # fmt: skip
def test_bad_settings_stop_before_any_run(tmp_path, fake, capsys, extra, message):
    engine = fake(val_peaks_at_small_lr_test_at_large)
    assert tune.main(tune_args(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and engine.launches == []


def test_tuned_toml_round_trips_and_applies_like_a_preset(tmp_path):
    values = {"fedavg": {"lr": 0.0158}, "fedmim": {"lr": 0.5, "fedmim-alphas": "0.6,0.3"},
              "fadamet": {"lr": 0.000949, "adam-eps": 1e-08},
              "scaffold-prox": {"lr": 0.05, "scaffold-option": 1}}  # fmt: skip
    path = tmp_path / "tuned.toml"
    tuned.write(path, values, ["chosen by: a test"])
    assert tuned.read(path) == values and tomllib.loads(path.read_text()) == values
    assert path.read_text().startswith("# chosen by: a test\n\n[fedavg]\nlr = 0.0158\n")
    assert tuned.with_tuned({"lr": 0.1, "seed": 3}, values, "fedmim") == {"lr": 0.1, "fedmim-alphas": "0.6,0.3",
                                                                          "seed": 3}  # fmt: skip
    with pytest.raises(ConfigError, match=r"no \[fedcm\] table; it has fedavg, fedmim"):
        tuned.values_for(values, "fedcm", path)
    for text, message in (("[nope]\nlr = 1.0\n", r"\[nope\] is not an algorithm"),
                          ("[fedavg]\nno-key = 1\n", "no-key: not a run-config key"),
                          ("[fedavg]\nlr = -1.0\n", "lr=-1.0: must be > 0"), ("[fedavg\n", "not valid TOML"),
                          ("fedavg = 1\n", "must be a table")):  # fmt: skip
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            tuned.read(path)
    with pytest.raises(ConfigError, match="cannot read"):
        tuned.read(tmp_path / "missing.toml")


# --- real runs (the in-process engine) ----------------------------------------------------------------------------


def real_scores(folder: Path) -> float:
    """A search run's score read independently: the mean val_accuracy of its last 3 evaluated rows."""
    values = [r["val_accuracy"] for r in map(json.loads, (folder / "rounds.jsonl").read_text().splitlines())
              if r.get("val_accuracy") is not None]  # fmt: skip
    return sum(values[-3:]) / len(values[-3:])


def check_real_tuning(out: Path, algorithm: str, seeds: list[int], final_seeds: list[int]) -> None:
    """The chosen values are the best mean validation score of the search runs; search runs held out a validation
    split, final runs did not and ran on the final seeds with the chosen values."""
    rows = read_csv(out / "search" / f"{algorithm}.csv")
    keys = [k for k in rows[0] if k not in ("trial", "mean_score", "status", "chosen", "no_better_than_initial")
            and not k.startswith("seed_")]  # fmt: skip
    means = {}
    for row in rows:
        point = tuple((k, row[k]) for k in keys)
        folders = [out / "search" / "runs" / algorithm / "_".join(f"{k}={v}" for k, v in point) / f"seed-{s}"
                   for s in seeds]  # fmt: skip
        for folder in folders:
            config = json.loads((folder / "config.json").read_text())["run_config"]
            assert config["validation-fraction"] == 0.1 and config["algorithm"] == algorithm
        means[point] = sum(real_scores(f) for f in folders) / len(folders)
        assert float(row["mean_score"]) == pytest.approx(means[point])
    best = max(means, key=means.get)
    chosen = tuned.read(out / "tuned.toml")[algorithm]
    assert {k: str(v) for k, v in chosen.items()} == dict(best)
    tag = "_".join(f"{k}={v}" for k, v in best)
    for seed in final_seeds:
        config = json.loads((out / "final" / "runs" / algorithm / tag / f"seed-{seed}" / "config.json").read_text())
        ran = config["run_config"]
        assert ran["validation-fraction"] == 0.0 and ran["seed"] == seed
        assert all(ran[k] == v for k, v in chosen.items())


def test_a_real_in_process_tuning_chooses_by_validation_and_runs_finals_without_it(tmp_path):
    argv = ["--algorithms", "fedavg", "--space", "lr=0.02,0.5", "-c", SHARED, "--seeds", "0", "--final-seeds", "5",
            "--engine", "inprocess", "--out", str(tmp_path)]  # fmt: skip
    assert tune.main(argv) == 0
    check_real_tuning(tmp_path, "fedavg", [0], [5])
    assert read_csv(tmp_path / "final" / "sweep.csv")[0]["seeds"] == "1/1"


@pytest.mark.slow
def test_real_grid_and_optuna_tunings_in_parallel_resume_and_agree(tmp_path, capsys):
    shared = SHARED.replace("num-server-rounds=3", "num-server-rounds=6")
    space = "lr=0.02,0.5 fedcm:fedcm-alpha=0.1,0.5 fedprox:prox-mu=0.01,0.1"
    argv = ["--algorithms", "fedavg,fedcm,fedprox", "--space", space, "-c", shared, "--seeds", "0,1", "--final-seeds",
            "7,8", "--engine", "inprocess", "--parallel", "2", "--out", str(tmp_path / "grid")]  # fmt: skip
    assert tune.main(argv) == 0
    for algorithm in ("fedavg", "fedcm", "fedprox"):
        check_real_tuning(tmp_path / "grid", algorithm, [0, 1], [7, 8])
    capsys.readouterr()
    assert tune.main(argv) == 0 and "── start" not in capsys.readouterr().out  # every run reused
    optuna = ["--algorithms", "fedcm", "-c", shared, "--seeds", "0", "--search", "optuna", "--trials", "4",
              "--final-seeds", "none", "--engine", "inprocess", "--parallel", "2"]  # fmt: skip
    assert tune.main([*optuna, "--out", str(tmp_path / "a")]) == 0
    assert tune.main([*optuna, "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "tuned.toml").read_text().split("\n", 2)[2] == (
        (tmp_path / "b" / "tuned.toml").read_text().split("\n", 2)[2])  # fmt: skip
    check_real_tuning(tmp_path / "a", "fedcm", [0], [])


def test_sweep_and_compare_take_the_tuned_values_with_the_command_line_keys_winning(tmp_path):
    from simulation import compare, sweep

    path = tmp_path / "tuned.toml"
    tuned.write(path, {"fedavg": {"lr": 0.2}, "fedprox": {"lr": 0.3, "prox-mu": 0.05}}, ["chosen by: a test"])
    values = tuned.read(path)
    shared = {"dataset": "synthetic-lsq", "prox-mu": 0.5}
    swept = sweep.jobs_for(["fedavg", "fedprox"], [()], [0], shared, tmp_path / "s", values)
    assert [(j.settings["lr"], j.settings["prox-mu"]) for j in swept] == [(0.2, 0.5), (0.3, 0.5)]
    compared = compare.jobs_for(["fedavg", "fedprox"], shared, tmp_path / "c", values)
    assert [j.settings["lr"] for j in compared] == [0.2, 0.3]
    assert compare.jobs_for(["fedavg"], shared, tmp_path / "c")[0].settings == {**shared, "algorithm": "fedavg"}
    assert sweep.main(["--algorithms", "fedavg", "--tuned", str(tmp_path / "missing.toml"), "--out",
                       str(tmp_path / "x")]) == 2  # fmt: skip
