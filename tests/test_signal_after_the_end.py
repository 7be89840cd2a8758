"""A signal that reaches simulation.run after its run had ended (docs/reliability.md): the console and the exit code
say what summary.json says, and an accuracy.png the signal cut off is drawn from the rows; a run still running when
the signal came is interrupted as before."""

from __future__ import annotations

import json
import signal

from fedsuite.run.inprocess import run_inprocess
from fedsuite.testing.kit import PARTIAL
from simulation.launcher.outcome import Interrupted
from simulation.run import unfinished


def test_a_signal_after_the_run_completed_keeps_its_status_and_draws_its_plot(tmp_path, capsys):
    run_inprocess({**PARTIAL, "out-dir": str(tmp_path), "run-name": "r"}, record=True)
    folder = tmp_path / "r"
    (folder / "accuracy.png").unlink()  # as if SIGTERM cut the plot off
    assert unfinished(Interrupted(signal.SIGTERM, folder)) == 0
    said = capsys.readouterr()
    assert "came after the run had ended completed" in said.err and "run completed" in said.out
    assert (folder / "accuracy.png").stat().st_size > 0
    assert json.loads((folder / "summary.json").read_text())["status"] == "completed"


def test_a_signal_during_the_run_is_still_an_interruption(tmp_path, capsys):
    run_inprocess({**PARTIAL, "out-dir": str(tmp_path), "run-name": "r"}, record=True)
    folder = tmp_path / "r"
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    assert unfinished(Interrupted(signal.SIGTERM, folder)) == 143
    assert "interrupted (stopped by SIGTERM)" in capsys.readouterr().err
