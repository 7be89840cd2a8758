"""Pruning of hopeless trials (simulation.tune --prune median, simulation/tuning/pruning.py; the run-config keys
prune-at and prune-score, fedsuite/server/pruning.py): a run behind its mark stops itself at that round with status
pruned; the marks are the median of the earlier trials' curves; on a least-squares federation the pruned search
picks the trial the full search picks, prunes the same runs at the same rounds when run again, and resumes without
running anything; bad settings are one line, exit 2, before any run."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.pruning import Pruning, format_marks, parse_marks
from simulation import tune
from simulation.tuning.pruning import STARTUP, MedianPruning

LSQ = {"dataset": "synthetic-lsq", "num-clients": 6, "clients-per-round": 3, "local-steps": 2,
       "validation-fraction": 0.25}  # fmt: skip
SHARED = ("dataset='synthetic-lsq' num-clients=6 clients-per-round=3 num-server-rounds=12 local-steps=2 "
          "validation-fraction=0.25")  # fmt: skip
GRID = "lr=0.002,0.005,0.01,0.02,0.05,0.1,0.2"


def test_marks_read_back_exactly_and_bad_marks_are_one_line_naming_the_key():
    marks = {20: 0.55, 3: 1 / 3}
    assert parse_marks(format_marks(marks)) == marks
    for bad in ("3", "x:1", "0:0.5", "3:0.5,3:0.6", "3:nan"):
        with pytest.raises(ConfigError, match="prune-at=") as err:
            resolve({**LSQ, "prune-at": bad})
        assert len(str(err.value).splitlines()) == 2  # the header line and the one error line
    with pytest.raises(ConfigError, match="prune-at needs a validation split"):
        resolve({**LSQ, "prune-at": "2:1.0", "validation-fraction": 0.0})
    with pytest.raises(ConfigError, match="prune-score"):
        resolve({**LSQ, "prune-score": "accuracy"})


def test_the_check_compares_in_the_scores_direction():
    accuracy = Pruning({4: 0.5}, "val_accuracy")
    assert accuracy.check(4, {"val_accuracy": 0.4})[0] == "pruned"
    assert accuracy.check(4, {"val_accuracy": 0.5}) is None  # at the mark: kept
    assert accuracy.check(3, {"val_accuracy": 0.1}) is None and accuracy.check(4, {"loss": 9.0}) is None
    loss = Pruning({4: 2.0}, "val_loss")
    assert loss.check(4, {"val_loss": 2.5})[0] == "pruned" and loss.check(4, {"val_loss": 1.5}) is None


def test_a_run_behind_its_mark_stops_at_that_round_as_pruned(tmp_path):
    config = {**LSQ, "num-server-rounds": 6, "prune-score": "val_loss", "out-dir": str(tmp_path)}
    run_inprocess({**config, "prune-at": "2:1e9,4:-1.0", "run-name": "behind"}, record=True)
    summary = json.loads((tmp_path / "behind" / "summary.json").read_text())
    assert summary["status"] == "pruned" and summary["rounds_completed"] == 4
    assert summary["reason"].startswith("round 4: val_loss") and "above its prune-at mark -1" in summary["reason"]
    rows = [json.loads(line) for line in (tmp_path / "behind" / "rounds.jsonl").read_text().splitlines()]
    assert [row["round"] for row in rows] == [0, 1, 2, 3, 4]
    run_inprocess({**config, "prune-at": "2:1e9", "run-name": "kept"}, record=True)
    assert json.loads((tmp_path / "kept" / "summary.json").read_text())["status"] == "completed"


def test_marks_are_the_median_of_the_completed_trials_from_the_warmup_on(monkeypatch):
    """MedianPruning: a mark per evaluated round from a quarter of the run on, before the last round, the median of
    the completed trials' curves once STARTUP of them have a value there; a pruned or diverged trial adds none."""
    from simulation.tuning import pruning as module
    from simulation.tuning.trials import Trial

    pruning = MedianPruning(rounds=12)
    curves = [{r: float(r * k) for r in range(2, 13, 2)} for k in range(1, STARTUP)]
    pruning.curves["a"] = list(curves)
    assert pruning.marks("a") == {}  # fewer than STARTUP completed trials: no mark
    pruning.curves["a"].append({r: 100.0 for r in range(2, 13, 2)})
    marks = pruning.marks("a")
    assert sorted(marks) == [4, 6, 8, 10]  # round 2 is before a quarter of 12; round 12 is the last
    assert marks[4] == pytest.approx((8.0 + 12.0) / 2) and marks[10] == pytest.approx((20.0 + 30.0) / 2)
    assert pruning.marks("b") == {}

    made = [Trial(1, "b", (("lr", 0.1),), [0], ["completed"], [1.0]), Trial(2, "b", (("lr", 0.2),), [0], ["pruned"],
            [None]), Trial(3, "b", (("lr", 0.3),), [0], ["diverged"], [None])]  # fmt: skip
    monkeypatch.setattr(module, "run_trials", lambda setting, algorithm, points, first: made)
    monkeypatch.setattr(module, "describe", lambda trial, *args: setattr(trial, "curve", {4: 1.0}))
    setting = SimpleNamespace(shared={}, column="val_loss", jobs=lambda algorithm, point: [])
    pruning(setting, "b", [t.point for t in made])
    assert pruning.curves["b"] == [{4: 1.0}]  # the completed trial's curve only


def test_the_rounds_saved_are_the_pruned_runs_rounds_only():
    from simulation.tuning.pruning import compute_line
    from simulation.tuning.trials import Trial

    pruned = Trial(1, "a", (), [0, 1], ["pruned", "completed"], [None, 1.0], rounds_run=16, rounds_planned=24,
                   pruned_at=4, rounds_saved=8)  # fmt: skip
    diverged = Trial(2, "a", (), [0, 1], ["diverged", "completed"], [None, 1.0], rounds_run=15, rounds_planned=24)
    line = compute_line({"a": [pruned, diverged]})
    assert line["rounds_run"] == 31 and line["rounds_planned"] == 48 and line["saved"] == pytest.approx(8 / 48)
    assert line["pruned_trials"] == 1 and line["trials"] == 2


def _search(folder: Path) -> list[dict]:
    with open(folder / "search" / "fedavg.csv") as f:
        return list(csv.DictReader(f))


def _tune(out: Path, prune: str) -> int:
    argv = ["--algorithms", "fedavg", "--space", GRID, "-c", SHARED, "--score", "loss", "--seeds", "0,1",
            "--final-seeds", "none", "--engine", "inprocess", "--prune", prune, "--out", str(out)]  # fmt: skip
    return tune.main(argv)


def test_pruning_keeps_the_winner_prunes_the_same_runs_again_and_resumes_without_running(tmp_path, capsys):
    assert _tune(tmp_path / "full", "off") == 0
    assert _tune(tmp_path / "a", "median") == 0
    full, pruned = _search(tmp_path / "full"), _search(tmp_path / "a")
    winner = [row["lr"] for row in full if row["chosen"] == "True"]
    assert winner and winner == [row["lr"] for row in pruned if row["chosen"] == "True"]
    stopped = [row for row in pruned if row["pruned_at_round"] not in ("", "None")]
    assert stopped and all(row["status"] == "pruned" and row["mean_score"] == "" for row in stopped)
    assert all(int(row["rounds_run"].split("/")[0]) < 24 for row in stopped)
    assert "saved" in (tmp_path / "a" / "tune.md").read_text()
    assert _tune(tmp_path / "b", "median") == 0  # again, from scratch: the same trials stop at the same rounds
    assert _search(tmp_path / "b") == pruned
    capsys.readouterr()
    assert _tune(tmp_path / "a", "median") == 0  # resumed: every run, pruned ones included, is reused
    out = capsys.readouterr().out
    assert "pruned earlier with the same settings: reused" in out and "progress:" not in out
    assert _search(tmp_path / "a") == pruned


def test_a_pruned_run_is_not_reused_by_a_search_without_its_marks(tmp_path, capsys):
    assert _tune(tmp_path, "median") == 0
    capsys.readouterr()
    assert _tune(tmp_path, "off") == 0  # the pruned runs run again in full
    assert "pruned earlier" not in capsys.readouterr().out
    assert all(row["status"] != "pruned" for row in _search(tmp_path))


def test_a_pruner_on_runs_that_evaluate_once_is_refused_before_any_run(tmp_path, capsys):
    argv = ["--algorithms", "fedavg", "-c", "dataset='synthetic-lsq' num-server-rounds=4 eval-every=4", "--score",
            "loss", "--final-seeds", "none", "--prune", "median", "--out", str(tmp_path)]  # fmt: skip
    assert tune.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prune median" in err[0] and "eval-every=4" in err[0]
    assert not (tmp_path / "search").exists()


def test_a_pruned_run_ends_its_launch_with_exit_code_0(tmp_path):
    """simulation.run reads summary.json's status: pruned is a stop the run config asked for, as budget-spent."""
    from fedsuite.results.folder import STATUSES
    from simulation.launcher.outcome import outcome

    (tmp_path / "summary.json").write_text(json.dumps({"status": "pruned", "reason": "round 4: …"}))
    assert outcome(tmp_path, "1", "finished:completed") == tmp_path and STATUSES["pruned"] == 0


def test_a_budgeted_tpe_search_tells_optuna_of_its_pruned_trials_and_repeats_itself(tmp_path, monkeypatch):
    """--budget with --prune: TPE is told a pruned trial was pruned (its curve as intermediate values), the search
    still gets its distinct points, and the same command proposes and prunes the same again."""
    shared = SHARED.replace("validation-fraction=0.25", "validation-fraction=0.25 prox-mu=0.01")
    argv = ["--algorithms", "fedprox", "--budget", "8", "--prune", "median", "-c", shared, "--score", "loss",
            "--seeds", "0,1", "--final-seeds", "none", "--engine", "inprocess"]  # fmt: skip
    import optuna

    told: list = []
    real_tell = optuna.study.Study.tell

    def tell(study, trial, values=None, state=None, **kwargs):
        told.append(state)
        return real_tell(study, trial, values, state, **kwargs)

    monkeypatch.setattr(optuna.study.Study, "tell", tell)
    assert tune.main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert optuna.trial.TrialState.PRUNED in told
    assert tune.main([*argv, "--out", str(tmp_path / "b")]) == 0
    with open(tmp_path / "a" / "search" / "fedprox.csv") as f:
        rows = list(csv.DictReader(f))
    with open(tmp_path / "b" / "search" / "fedprox.csv") as f:
        assert list(csv.DictReader(f)) == rows
    assert len({(row["lr"], row["prox-mu"]) for row in rows}) == 8
    assert any(row["status"] == "pruned" for row in rows) and any(row["chosen"] == "True" for row in rows)
