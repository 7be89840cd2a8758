"""The studies (compare, sweep, tune) against what goes wrong around them: a signal (SIGTERM as Ctrl-C: runs in
flight and child processes stopped and waited for, statuses `interrupted`, a rerun line, exit 143/130), damaged
run folders (run again, never a traceback, tables rewritten), duplicate seeds and algorithms (refused), bad
`--space`/`--grid` values (the flag named); and what they show: progress and the files they wrote."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsuite.config.run_config import ConfigError
from simulation import compare, sweep, tune
from simulation.experiment import flags, report, runner
from simulation.experiment import jobs as experiment_jobs
from simulation.experiment.flags import parse_grid, parse_list
from simulation.experiment.jobs import Job
from simulation.experiment.progress import StudyProgress, latest_round
from simulation.experiment.runner import run_jobs
from simulation.launcher.overrides import parse_overrides

PROJECT = Path(__file__).resolve().parent.parent
SETTING = "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=3 targets='0.5'"
LONG = "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=100000"
QUIET = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
         "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}  # fmt: skip


# --- signals ------------------------------------------------------------------------------------------------------


def _start(module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=PROJECT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **QUIET})  # fmt: skip


def _wait_for_rounds(proc: subprocess.Popen, folders: list[Path], timeout: float = 60.0) -> None:
    """Until every folder's rounds.jsonl holds a trained round (the runs are in flight)."""
    deadline = time.monotonic() + timeout
    while not all(latest_round(f) > 0 for f in folders):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the runs did not start (rc {proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")
        time.sleep(0.2)


def _processes_naming(path: Path) -> list[int]:
    """Processes (other than this one) whose command line names `path` (a study's child runs do: their out-dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(path).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _stop(proc: subprocess.Popen, signum: int) -> tuple[int, str]:
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the study did not end within 60 s of the signal")
    return proc.returncode, err


def _interrupted_and_clean(folder: Path) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "interrupted", summary
    assert not (folder / ".fedsuite-reserve").exists()


def test_sigterm_stops_a_sweep_like_ctrl_c(tmp_path):
    (tmp_path / "sweep.md").write_text("an earlier table\n")  # never left looking current
    proc = _start("simulation.sweep", "--algorithms", "fedavg", "--seeds", "0,1", "-c", LONG, "--engine", "inprocess",
                  "--out", str(tmp_path))  # fmt: skip
    run = tmp_path / "runs" / "fedavg" / "default" / "seed-0"
    _wait_for_rounds(proc, [run])
    rc, err = _stop(proc, signal.SIGTERM)
    assert rc == 143, err
    _interrupted_and_clean(run)
    assert json.loads((run / "summary.json").read_text())["reason"] == "the ServerApp was stopped (stopped by SIGTERM)"
    assert "stopped by SIGTERM" in err and "rerun to continue: python -m simulation.sweep --algorithms fedavg" in err
    assert "Traceback" not in err and not (tmp_path / "sweep.md").exists()
    assert not (tmp_path / "runs" / "fedavg" / "default" / "seed-1").exists()  # nothing ran after the signal
    job = sweep.jobs_for(["fedavg"], [()], [0], parse_overrides([LONG]), tmp_path)[0]
    assert job.folder == run and experiment_jobs.reusable(job) is None  # the rerun runs it again


def test_sigterm_stops_and_waits_for_a_tunings_parallel_children(tmp_path):
    proc = _start("simulation.tune", "--algorithms", "fedavg", "--space", "lr=0.1", "--seeds", "0,1",
                  "--final-seeds", "none", "-c", LONG, "--engine", "inprocess", "--parallel", "2",
                  "--out", str(tmp_path))  # fmt: skip
    runs = [tmp_path / "search" / "runs" / "fedavg" / "lr=0.1" / f"seed-{s}" for s in (0, 1)]
    _wait_for_rounds(proc, runs)
    assert len(_processes_naming(tmp_path)) >= 2  # the two children
    rc, err = _stop(proc, signal.SIGTERM)
    assert rc == 143, err
    assert _processes_naming(tmp_path) == []  # stopped and waited for, none re-parented and still writing
    for run in runs:
        _interrupted_and_clean(run)
        rows = (run / "rounds.jsonl").read_text()
        time.sleep(1.0)
        assert (run / "rounds.jsonl").read_text() == rows
    assert "rerun to continue: python -m simulation.tune --algorithms fedavg" in err


def test_sigint_stops_a_comparison_with_130_and_a_rerun_that_skips_finished_runs(tmp_path):
    proc = _start("simulation.compare", "--algorithms", "fedavg,scaffold", "-c", LONG, "--engine", "inprocess",
                  "--out", str(tmp_path))  # fmt: skip
    run = tmp_path / "runs" / "fedavg"
    _wait_for_rounds(proc, [run])
    rc, err = _stop(proc, signal.SIGINT)
    assert rc == 130, err
    _interrupted_and_clean(run)
    assert "rerun to continue: python -m simulation.compare" in err and "--skip-finished" in err
    assert "Traceback" not in err


def test_a_signal_in_a_child_marks_its_run_interrupted(tmp_path):
    """The child's own handler (SIGTERM from the study, or its parent's death) writes the status itself."""
    job = Job({**parse_overrides([LONG]), "algorithm": "fedavg"}, tmp_path / "run")
    proc = subprocess.Popen(runner.child_command(job, "inprocess"), cwd=PROJECT, env={**os.environ, **QUIET},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_rounds(proc, [job.folder])
    rc, err = _stop(proc, signal.SIGTERM)
    assert rc == 143, err
    _interrupted_and_clean(job.folder)


# --- damaged run folders ------------------------------------------------------------------------------------------


def _cut_last_line(folder: Path) -> None:
    path = folder / "rounds.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])


def test_a_damaged_run_is_named_and_not_reused(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "rounds_completed": 2}))
    (folder / "config.json").write_text(json.dumps({"run_config": {"algorithm": "fedavg"}}))
    (folder / "rounds.jsonl").write_text('{"round": 0}\n{"round": 1}\n{"round": 2}\n')
    assert report.damage(folder) is None and experiment_jobs.ended_as(folder, {"algorithm": "fedavg"}) == "completed"
    _cut_last_line(folder)
    assert "rounds.jsonl line 3 is not whole JSON" in report.damage(folder)
    assert experiment_jobs.ended_as(folder, {"algorithm": "fedavg"}) is None
    with pytest.raises(report.DamagedRun, match="line 3"):
        report.read_rows(folder)
    (folder / "rounds.jsonl").write_text('{"round": 0}\n{"round": 1}\n')  # a whole line missing
    assert "holds 1 rounds, summary.json counts 2" in report.damage(folder)


def test_a_sweep_reruns_a_damaged_run_and_rewrites_its_tables(tmp_path, capsys):
    argv = ["--algorithms", "fedavg", "--seeds", "0", "-c", SETTING, "--engine", "inprocess", "--out", str(tmp_path)]
    assert sweep.main(argv) == 0
    run = tmp_path / "runs" / "fedavg" / "default" / "seed-0"
    whole = report.read_rows(run)
    _cut_last_line(run)
    (tmp_path / "sweep.md").write_text("stale\n")
    capsys.readouterr()
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "0 ended earlier" in out and "damaged:" in out and "line 4 is not whole JSON" in out
    assert report.damage(run) is None and len(report.read_rows(run)) == len(whole)  # run again, whole
    assert (tmp_path / "sweep.md").read_text().startswith("Reproduce:")


def test_compare_skip_finished_reruns_a_damaged_run(tmp_path, capsys):
    argv = ["--algorithms", "fedavg", "-c", SETTING, "--engine", "inprocess", "--out", str(tmp_path)]
    assert compare.main(argv) == 0
    _cut_last_line(tmp_path / "runs" / "fedavg")
    capsys.readouterr()
    assert compare.main([*argv, "--skip-finished"]) == 0
    assert "damaged:" in capsys.readouterr().out and report.damage(tmp_path / "runs" / "fedavg") is None


def test_a_damaged_run_in_a_table_is_named_not_a_traceback(tmp_path, capsys):
    assert sweep.main(["--algorithms", "fedavg", "--seeds", "0", "-c", SETTING, "--engine", "inprocess",
                       "--out", str(tmp_path)]) == 0  # fmt: skip
    jobs = sweep.jobs_for(["fedavg"], [()], [0], {}, tmp_path)
    _cut_last_line(jobs[0].folder)
    rows = sweep.aggregate(jobs, [0.5])
    assert rows[0]["seeds"] == "0/1" and "line 4 is not whole JSON" in capsys.readouterr().err
    folder = tmp_path / "runs" / "fedavg" / "default" / "seed-0"
    outcome = experiment_jobs.Outcome(Job({}, folder, keys={"algorithm": "a"}), "completed")
    assert compare.result(outcome, [0.5])["status"].startswith("damaged: ")


# --- duplicates and bad values ------------------------------------------------------------------------------------


def test_duplicates_are_refused_naming_the_flag_and_the_item(tmp_path, capsys):
    assert parse_list("0, 1,2", "--seeds", int) == [0, 1, 2]
    with pytest.raises(ConfigError, match=r"--seeds '0,0': 0 is given twice"):
        parse_list("0,0", "--seeds", int)
    with pytest.raises(ConfigError, match="--grid 'lr=0.1,0.1': 0.1 is given twice"):
        parse_grid("lr=0.1,0.1")
    with pytest.raises(ConfigError, match="--grid: lr is given twice"):
        parse_grid("lr=0.1 lr=0.2")
    for main, argv, flag in (
        (sweep.main, ["--algorithms", "fedavg", "--seeds", "0,0"], "--seeds '0,0': 0 is given twice"),
        (sweep.main, ["--algorithms", "fedavg,fedavg", "--seeds", "0"], "--algorithms 'fedavg,fedavg': fedavg"),
        (compare.main, ["--algorithms", "fedavg,fedavg"], "--algorithms 'fedavg,fedavg': fedavg is given twice"),
        (tune.main, ["--algorithms", "fedavg,fedavg"], "--algorithms 'fedavg,fedavg': fedavg is given twice"),
        (tune.main, ["--algorithms", "fedavg", "--seeds", "1,1"], "--seeds '1,1': 1 is given twice"),
        (tune.main, ["--algorithms", "fedavg", "--final-seeds", "7,7"], "--final-seeds '7,7': 7 is given twice"),
    ):
        assert main([*argv, "-c", SETTING, "--engine", "inprocess", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert flag in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "search").exists()


def test_the_paper_studies_refuse_duplicates_too(tmp_path, capsys):
    from simulation.studies import dlg, lowrank
    from simulation.studies import lora as lora_study
    from simulation.studies import losac_table2 as table2

    for main, argv, said in (
        (lora_study.main, ["--seeds", "0,0"], "--seeds '0,0': 0 is given twice"),
        (lowrank.main, ["--ranks", "2,2"], "--ranks '2,2': 2 is given twice"),
        (table2.main, ["--algorithms", "fedavg,fedavg"], "--algorithms 'fedavg,fedavg': fedavg is given twice"),
        (dlg.main, ["--algorithms", "fedavg,fedavg"], "--algorithms 'fedavg,fedavg': fedavg is given twice"),
    ):
        assert main(["--out", str(tmp_path), *argv]) == 2
        assert said in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_rerun_line_is_a_command_a_shell_runs_as_given():
    line = flags.shell_command("simulation.sweep", ["--seeds", "0,1", "-c", "dataset='x' lr=0.1", "-c", 'a="$b"'])
    assert line == """python -m simulation.sweep --seeds 0,1 -c "dataset='x' lr=0.1" -c 'a="$b"'"""


def test_a_bad_space_or_grid_value_names_its_flag(tmp_path, capsys):
    assert tune.main(["--algorithms", "fedavg", "--space", "lr=abc", "-c", SETTING, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --space lr='abc'") and "-c" not in err.split("(")[0]
    assert sweep.main(["--algorithms", "fedavg", "--grid", "lr=abc", "-c", SETTING, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --grid lr='abc'")


def test_tune_refuses_an_empty_validation_split_before_its_first_run(tmp_path, capsys):
    argv = ["--algorithms", "fedavg", "--space", "lr=0.1", "--seeds", "0", "--final-seeds", "none", "-c",
            SETTING + " validation-fraction=0.001", "--engine", "inprocess", "--out", str(tmp_path)]  # fmt: skip
    assert tune.main(argv) == 2
    assert "validation-fraction=0.001: every client's validation share is empty" in capsys.readouterr().err
    assert not (tmp_path / "search").exists()


# --- progress and the files written -------------------------------------------------------------------------------


def test_progress_reads_each_runs_round_from_its_rounds_file(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    progress = StudyProgress(2, {0: 10, 1: 10}, reused=1, live=False, stream=open(os.devnull, "w"))
    progress.started(0, "fedavg seed 0", folder)
    assert "round 0/10" in progress.line() and "time left: after the first round" in progress.line()
    (folder / "rounds.jsonl").write_text("".join(json.dumps({"round": r}) + "\n" for r in range(4)) + '{"rou')
    line = progress.line()
    assert "runs 0/2 done (1 reused)" in line and "fedavg seed 0: round 3/10" in line and "left" in line
    progress.finished(0, "completed")
    assert progress.rounds_done == 10 and "runs 1/2 done" in progress.line()
    assert latest_round(folder, since=time.time() + 60) == 0  # a file from before the run started: not its round


def test_compare_shows_progress_names_its_files_and_writes_a_column_per_target(tmp_path, capsys):
    setting = SETTING.replace("targets='0.5'", "targets='0.5,0.9'")
    assert compare.main(["--algorithms", "fedavg", "-c", setting, "--engine", "inprocess", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "progress: runs 1/1 done" in out and "elapsed" in out
    assert out.rstrip().endswith("\n".join(f"  {tmp_path / n}" for n in ("comparison.md", "comparison.csv",
                                                                         "comparison.png")))  # fmt: skip
    with open(tmp_path / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert "rounds_to" not in rows[0] and {"rounds_to_0.5", "rounds_to_0.9"} <= set(rows[0])
    summary = json.loads((tmp_path / "runs" / "fedavg" / "summary.json").read_text())
    assert rows[0]["rounds_to_0.5"] == str(summary["rounds_to_target"]["0.5"] or "")


def test_run_jobs_progress_counts_runs_and_names_the_reused(tmp_path, capsys):
    tiny = {**parse_overrides([SETTING]), "algorithm": "fedavg"}
    jobs = [Job({**tiny, "seed": s}, tmp_path / f"seed-{s}", f"seed {s}") for s in (0, 1)]
    run_jobs(jobs[:1], "inprocess", reuse=True)
    capsys.readouterr()
    assert [o.reused for o in run_jobs(jobs, "inprocess", reuse=True)] == [True, False]
    out = capsys.readouterr().out
    assert "progress: runs 1/1 done (1 reused)" in out
