"""simulation.experiment: jobs and the one runner (in process and as --parallel children), reuse of finished runs,
honest statuses (a failed or diverged job is recorded as such, the others still run)."""

from __future__ import annotations

import json

import pytest

from fedsuite.config.run_config import ConfigError
from simulation.experiment import report
from simulation.experiment.flags import grid_tag, parse_grid
from simulation.experiment.jobs import Job, finished, is_finished, validate
from simulation.experiment.runner import run_jobs

TINY = {"dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 2, "num-server-rounds": 3}


def test_grid_points_and_their_folder_names():
    points = parse_grid("lr=0.01,0.05 local-epochs=2")
    assert points == [(("lr", 0.01), ("local-epochs", 2)), (("lr", 0.05), ("local-epochs", 2))]
    assert grid_tag(points[0]) == "lr=0.01_local-epochs=2" and grid_tag(()) == "default"
    assert grid_tag((("fedmim-alphas", "0.3,0.1"),)) == "fedmim-alphas=0.3-0.1"  # no comma in a path
    with pytest.raises(ConfigError, match="key=value1,value2"):
        parse_grid("lr=")


def test_a_job_runs_into_its_own_folder(tmp_path):
    job = Job({"algorithm": "fedavg", "seed": 1}, tmp_path / "runs" / "fedavg" / "seed-1")
    assert job.overrides() == {"algorithm": "fedavg", "seed": 1, "out-dir": str(tmp_path / "runs" / "fedavg"),
                               "run-name": "seed-1", "overwrite": True}  # fmt: skip


def test_bad_settings_are_found_before_anything_runs():
    with pytest.raises(ConfigError, match="lr"):
        validate([Job({**TINY, "algorithm": "fedavg"}), Job({**TINY, "algorithm": "fedavg", "lr": -1.0})])
    with pytest.raises(ConfigError, match="engine"):
        run_jobs([], engine="ray")


def test_a_failing_job_is_recorded_as_failed_and_the_others_still_run(capsys):
    def broken():
        raise FloatingPointError("x is not finite")

    seen = []
    jobs = [Job({}, label="a", work=lambda: 1), Job({}, label="b", work=broken), Job({}, label="c", work=lambda: 3)]
    outcomes = run_jobs(jobs, on_done=seen.append)
    assert [o.status for o in outcomes] == ["completed", "failed", "completed"]
    assert [o.value for o in outcomes] == [1, None, 3] and [o.job.label for o in seen] == ["a", "b", "c"]
    assert outcomes[1].message == "FloatingPointError: x is not finite"
    assert "   failed: FloatingPointError: x is not finite" in capsys.readouterr().out


def test_in_process_jobs_have_honest_statuses_and_finished_ones_are_reused(tmp_path, capsys):
    ok = Job({**TINY, "algorithm": "fedavg", "lr": 0.02}, tmp_path / "ok", "ok")
    bad = Job({**TINY, "algorithm": "fedavg", "lr": 50.0}, tmp_path / "bad", "bad")
    first = run_jobs([ok, bad], "inprocess", reuse=True)
    assert [o.status for o in first] == ["completed", "diverged"] and first[1].message
    assert report.run_status(tmp_path / "bad") == "diverged"
    summary = report.read_summary(tmp_path / "ok")
    assert report.run_summary(tmp_path / "ok", [0.5])["s_per_round"] == summary["steady_round_seconds"]
    assert is_finished(ok) and not is_finished(bad)
    assert not finished(tmp_path / "ok", {**TINY, "algorithm": "fedavg", "lr": 0.03})  # other settings: redone
    capsys.readouterr()
    again = run_jobs([ok, bad], "inprocess", reuse=True)
    assert [(o.status, o.reused) for o in again] == [("completed", True), ("diverged", True)]  # a rerun repeats it
    assert again[1].message == "diverged earlier with the same settings"
    assert capsys.readouterr().out.count("reused") == 2
    (tmp_path / "bad" / "summary.json").write_text(json.dumps({"status": "failed"}))  # a crash is tried again
    assert [(o.status, o.reused) for o in run_jobs([bad], "inprocess", reuse=True)] == [("diverged", False)]


def test_parallel_children_report_each_status(tmp_path):
    jobs = [Job({**TINY, "algorithm": "fedavg", "lr": lr}, tmp_path / name, name)
            for name, lr in (("ok", 0.02), ("bad", 50.0))]  # fmt: skip
    outcomes = run_jobs(jobs, "inprocess", parallel=2)
    assert [o.status for o in outcomes] == ["completed", "diverged"]
    config = json.loads((tmp_path / "ok" / "config.json").read_text())["run_config"]
    assert config["lr"] == 0.02 and config["num-clients"] == 4
