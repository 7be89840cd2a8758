"""How a study ends, told truly (docs/running/compare-and-sweep.md): an --out that is a file is one line and exit 2
before any run; a table that a full disk stops is one line and exit 1 with the runs kept; a run no better than its
initial model is marked in every table; a study killed with SIGKILL leaves its in-process run `interrupted`, a child
killed so leaves its run `failed`; and a signal that arrives while a run writes its end waits for those writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulation import compare, sweep, tune
from simulation.experiment import report
from tests.test_crash_safety import fill, small_disk, temporaries
from tests.test_study_robustness import LONG, PROJECT, QUIET, SETTING, _processes_naming, _start, _wait_for_rounds

LEARNS_NOTHING = "lr=1e-9"  # 3 rounds that move no prediction: the last model's accuracy is round 0's


def _one_line(capsys, *said: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and all(s in lines[0] for s in said), err
    assert "NotADirectoryError" not in err and "OSError" not in err, err
    return lines[0]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


# --- where a study writes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("below", [False, True])
def test_an_out_that_is_a_file_is_one_line_and_exit_2_before_any_run(tmp_path, capsys, below):
    """Before: NotADirectoryError's traceback (removing the earlier tables)."""
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    out = str(file / "sub" if below else file)
    for main, argv in ((sweep.main, ["--algorithms", "fedavg", "--seeds", "0"]),
                       (compare.main, ["--algorithms", "fedavg"]),
                       (tune.main, ["--algorithms", "fedavg", "--seeds", "0", "--final-seeds", "none"])):  # fmt: skip
        assert main([*argv, "-c", SETTING, "--engine", "inprocess", "--out", out]) == 2
        _one_line(capsys, f"--out {out}:", "not a folder")
    assert file.read_text() == "mine\n" and sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_a_full_disk_while_a_tuning_writes_its_tables_is_one_line_exit_1_and_the_runs_kept(tmp_path, capsys,
                                                                                           monkeypatch):  # fmt: skip
    """Before: write_search's OSError ended the tuning in a traceback. The disk fills once the search's runs have
    ended, as the tables are written."""
    searched = tune.tune

    def search_then_fill(*args, **kwargs):
        trials = searched(*args, **kwargs)
        fill(disk)
        return trials

    argv = ["--algorithms", "fedavg", "--space", "lr=0.1,0.2", "--seeds", "0", "--final-seeds", "none", "-c",
            SETTING, "--engine", "inprocess"]  # fmt: skip
    with small_disk(tmp_path / "disk", "2m") as disk:
        out = disk / "tune"
        monkeypatch.setattr(tune, "tune", search_then_fill)
        assert tune.main([*argv, "--out", str(out)]) == 1
        line = _one_line(capsys, f"cannot write {out / 'search'}", "No space left on device", "runs' folders are kept",
                         "rerun to write it: python -m simulation.tune")  # fmt: skip
        assert "Traceback" not in line
        runs = [out / "search" / "runs" / "fedavg" / f"lr={lr}" / "seed-0" for lr in (0.1, 0.2)]
        assert all(_summary(run)["status"] == "completed" for run in runs)  # nothing lost
        assert not temporaries(out) and not (out / "tune.md").exists()
        for filler in disk.glob("filler-*"):
            filler.unlink()
        monkeypatch.setattr(tune, "tune", searched)
        assert tune.main([*argv, "--out", str(out)]) == 0
        assert "(2 of 2 runs ended earlier)" in capsys.readouterr().out  # the search's runs reused
        assert (out / "search" / "fedavg.md").exists() and (out / "tune.md").exists()


def test_a_table_that_cannot_be_written_leaves_no_part_of_it(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        (disk / "sweep.md").write_text("the earlier table\n")
        fill(disk)
        with pytest.raises(OSError) as err:
            report.write_text(disk / "sweep.md", "x" * 200_000)
        assert err.value.filename == str(disk / "sweep.md")  # the table named, not its temporary file
        assert (disk / "sweep.md").read_text() == "the earlier table\n" and not temporaries(disk)


# --- runs that learned nothing ------------------------------------------------------------------------------------


def test_a_run_no_better_than_its_initial_model_is_marked_in_every_table(tmp_path, capsys):
    """Before: simulation.run said so, but the sweep, comparison and tuning tables showed the run as any other."""
    quiet = f"{SETTING} {LEARNS_NOTHING}"
    assert sweep.main(["--algorithms", "fedavg", "--seeds", "0,1", "-c", quiet, "--engine", "inprocess",
                       "--out", str(tmp_path / "s")]) == 0  # fmt: skip
    assert all(_summary(p)["no_better_than_initial"] for p in (tmp_path / "s").glob("runs/*/*/*"))
    table = (tmp_path / "s" / "sweep.md").read_text().split("\n\n")[2].splitlines()
    assert table[0].endswith("| MB/client/round | no better than initial |")
    assert table[2].startswith("| fedavg | default | 2/2 |") and table[2].endswith("| 2/2 |")
    assert report.NO_BETTER_NOTE in (tmp_path / "s" / "sweep.md").read_text()
    with open(tmp_path / "s" / "sweep.csv") as f:
        assert f.read().splitlines()[0].endswith(",no_better_than_initial")
    assert compare.main(["--algorithms", "fedavg", "-c", quiet, "--engine", "inprocess",
                         "--out", str(tmp_path / "c")]) == 0  # fmt: skip
    table = (tmp_path / "c" / "comparison.md").read_text().split("\n\n")[1].splitlines()
    assert table[0].endswith("| no better than initial |") and table[2].endswith("| yes |")
    assert "no better than initial model" in capsys.readouterr().out
    assert tune.main(["--algorithms", "fedavg", "--space", LEARNS_NOTHING, "--seeds", "0", "--final-seeds", "5",
                      "-c", SETTING, "--engine", "inprocess", "--out", str(tmp_path / "t")]) == 0  # fmt: skip
    assert "| 1/1 |" in (tmp_path / "t" / "search" / "fedavg.md").read_text()
    text = (tmp_path / "t" / "tune.md").read_text()
    chosen = next(line for line in text.splitlines() if line.startswith("| fedavg | lr=1e-09 | "))
    final = next(line for line in text.splitlines() if line.startswith("| fedavg | lr=1e-09 | 1/1 | "))
    assert chosen.endswith("| 1/1 |") and final.endswith("| 1/1 |") and text.count(report.NO_BETTER_NOTE) == 2


def test_a_table_without_such_a_run_has_no_mark():
    run = {"status": "completed", "seed": 0, "no_better_than_initial": False, "rounds_to": {}, "curve": [(1, 0.9)],
           **dict.fromkeys(sweep.METRICS, 0.9)}  # fmt: skip
    row = {"algorithm": "fedavg", "grid": "default", **report.over_seeds([run], [], sweep.METRICS)}
    assert row["no_better_than_initial"] == 0
    assert "no better" not in sweep.markdown([row], [], "python -m simulation.sweep …")


# --- signals ------------------------------------------------------------------------------------------------------


def test_sigkill_to_an_in_process_sweep_leaves_its_run_interrupted(tmp_path):
    """Before: the run's summary said `running` for ever (the flwr path has a reaper; the in-process one had none).
    SCAFFOLD keeps its client state in a per-run folder in RAM, which goes too."""
    proc = _start("simulation.sweep", "--algorithms", "scaffold", "--seeds", "0", "-c", LONG, "--engine",
                  "inprocess", "--out", str(tmp_path))  # fmt: skip
    run = tmp_path / "runs" / "scaffold" / "default" / "seed-0"
    _wait_for_rounds(proc, [run])
    held = json.loads((run / "config.json").read_text())["client_state_dir"]
    assert held and Path(held).is_dir()
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 60
    while _summary(run)["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    summary = _summary(run)
    assert summary["status"] == "interrupted", summary
    assert summary["reason"] == "the study that ran it in its own process ended before the run did"
    while Path(held).exists() and time.monotonic() < deadline:  # the watcher's last step
        time.sleep(0.2)
    assert not Path(held).exists() and not temporaries(run)


def test_a_child_killed_by_sigkill_leaves_its_run_failed(tmp_path):
    """A --parallel child that the kernel kills (its out-of-memory killer) cannot mark its run; the study does."""
    proc = _start("simulation.sweep", "--algorithms", "fedavg", "--seeds", "0,1", "-c", LONG, "--engine", "inprocess",
                  "--parallel", "2", "--out", str(tmp_path))  # fmt: skip
    runs = [tmp_path / "runs" / "fedavg" / "default" / f"seed-{s}" for s in (0, 1)]
    _wait_for_rounds(proc, runs)
    killed = next(pid for pid in _processes_naming(tmp_path) if pid != proc.pid
                  and b'"run-name": "seed-0"' in Path(f"/proc/{pid}/cmdline").read_bytes())  # fmt: skip
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while _summary(runs[0])["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert _summary(runs[0])["status"] == "failed"
    assert _summary(runs[0])["reason"] == "the run's process was killed by SIGKILL"
    assert "── done fedavg default seed 0: failed ──" in out
    assert _summary(runs[1])["status"] == "interrupted"


STOP_AT_THE_PLOT = """
import os, signal, sys
from fedsuite.results import folder as results
plot = results.RunRecorder.plot
def stopped_at_the_plot(recorder):  # SIGTERM arrives as the finished run draws its plot
    os.kill(os.getpid(), signal.SIGTERM)
    plot(recorder)
results.RunRecorder.plot = stopped_at_the_plot
from simulation import sweep
sys.exit(sweep.main(sys.argv[1:]))
"""


def test_a_signal_while_a_run_writes_its_end_waits_for_those_writes(tmp_path):
    """Before: the run's summary said `completed` but it had no plot, and the console said it was interrupted."""
    proc = subprocess.run([sys.executable, "-c", STOP_AT_THE_PLOT, "--algorithms", "fedavg", "--seeds", "0,1", "-c",
                           SETTING, "--engine", "inprocess", "--out", str(tmp_path)], cwd=PROJECT,
                          env={**os.environ, **QUIET}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 143, proc.stderr
    run = tmp_path / "runs" / "fedavg" / "default" / "seed-0"
    assert _summary(run)["status"] == "completed" and (run / "accuracy.png").stat().st_size > 1000
    assert "interrupted: the ServerApp was stopped" not in proc.stderr
    assert "interrupted (stopped by SIGTERM); finished runs are kept" in proc.stderr
    assert "runs 1/2 done" in proc.stdout and not (tmp_path / "runs" / "fedavg" / "default" / "seed-1").exists()
