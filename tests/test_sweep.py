"""simulation.sweep: algorithms × seeds × grid into one folder, mean ± std over seeds, resumable, parallel."""

from __future__ import annotations

import csv
import json

import pytest

from fedsuite.config.run_config import ConfigError
from simulation import sweep
from simulation.experiment.report import mean_std

SETTING = "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=3 targets='0.5'"


def test_grid_is_the_cartesian_product_with_toml_values():
    points = sweep.parse_grid("lr=0.01,0.05 local-epochs=2,5 algorithm-x='a'")
    assert len(points) == 4 and points[0] == (("lr", 0.01), ("local-epochs", 2), ("algorithm-x", "a"))
    assert sweep.parse_grid("") == [()]
    with pytest.raises(ConfigError, match="key=value1,value2"):
        sweep.parse_grid("lr")


def test_mean_and_sample_std():
    assert mean_std([]) is None and mean_std([2.0]) == (2.0, 0.0)
    mean, std = mean_std([1.0, 2.0, 3.0])
    assert mean == 2.0 and std == pytest.approx(1.0)


def test_sweep_runs_every_seed_aggregates_and_resumes(tmp_path, capsys):
    argv = ["--algorithms", "fedavg,losac", "--seeds", "0,1", "--grid", "lr=0.05", "-c", SETTING,
            "--engine", "inprocess", "--out", str(tmp_path)]  # fmt: skip
    assert sweep.main(argv) == 0
    runs = sorted(p.parent.relative_to(tmp_path / "runs").as_posix() for p in tmp_path.glob("runs/*/*/*/summary.json"))
    assert len(runs) == 4 and "losac/lr=0.05/seed-1" in runs
    finals = {}
    for seed in (0, 1):
        summary = json.loads((tmp_path / f"runs/fedavg/lr=0.05/seed-{seed}/summary.json").read_text())
        finals[seed] = summary["final_accuracy"]
        assert json.loads((tmp_path / f"runs/fedavg/lr=0.05/seed-{seed}/config.json").read_text())["run_config"][
            "seed"] == seed  # fmt: skip
    with open(tmp_path / "sweep.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["algorithm"] == "fedavg" and r["grid"] == "lr=0.05")
    assert float(row["final_acc_mean"]) == pytest.approx((finals[0] + finals[1]) / 2, abs=1e-9)
    assert row["seeds"] == "2/2" and "Δ vs fedavg" in (tmp_path / "sweep.md").read_text()
    low, high = float(row["final_acc_ci_low"]), float(row["final_acc_ci_high"])  # the 95 % interval of the mean
    assert low < float(row["final_acc_mean"]) < high or low == high
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    capsys.readouterr()
    assert sweep.main(argv) == 0 and "4 ended earlier (completed or diverged) and reused" in capsys.readouterr().out


def test_parallel_children_write_the_same_runs(tmp_path):
    argv = ["--algorithms", "fedavg", "--seeds", "0,1", "-c", SETTING, "--engine", "inprocess", "--parallel", "2"]
    assert sweep.main([*argv, "--out", str(tmp_path / "par")]) == 0
    assert sweep.main([*argv[:-2], "--out", str(tmp_path / "seq")]) == 0
    for seed in (0, 1):
        par, seq = (json.loads((tmp_path / f"{w}/runs/fedavg/default/seed-{seed}/summary.json").read_text())
                    for w in ("par", "seq"))  # fmt: skip
        assert par["status"] == "completed" and par["final_accuracy"] == seq["final_accuracy"]


def test_bad_settings_stop_before_any_run(tmp_path):
    assert sweep.main(["--algorithms", "fedavg", "--grid", "lr=-1", "-c", SETTING, "--out", str(tmp_path)]) == 2
    assert sweep.main(["--algorithms", "nope", "-c", SETTING, "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "runs").exists()
