"""simulation.experiment.report: the one steady s/round, a run's summary from its folder, mean ± std over seeds (a
diverged seed counted, never averaged), markdown, CSV columns and plots."""

from __future__ import annotations

import csv
import json
import math

import pytest

from simulation import sweep
from simulation.experiment import report

TARGETS = [0.5, 0.9]


def rows(*seconds, evaluation: bool = True) -> list[dict]:
    """Round 0 (the initial evaluation, no training) and one row per trained round with these round_seconds."""
    out = [{"round": 0, "accuracy": 0.1}] if evaluation else []
    return out + [{"round": i + 1, "round_seconds": s, "accuracy": 0.1 * (i + 2)} for i, s in enumerate(seconds)]


def test_steady_is_the_median_after_the_cold_start():
    assert report.steady_seconds(rows(10.0, 2.0, 4.0, 3.0)) == 3.0  # round 1 (10 s) left out, odd count
    assert report.steady_seconds(rows(10.0, 2.0, 4.0)) == 3.0  # even count: mean of the middle two
    assert report.steady_seconds(rows(10.0)) is None  # no round after the cold start
    assert report.steady_seconds(rows(10.0, 2.0, None, math.nan, 4.0)) == 3.0  # missing and non-finite ignored


def test_steady_without_the_last_round_is_a_parameter_of_the_same_definition():
    timed = rows(10.0, 2.0, 4.0, 3.0, 50.0, evaluation=False)  # round 5 also evaluates (the benchmark)
    assert report.steady_seconds(timed, skip_last=True) == 3.0
    assert report.steady_seconds(timed) == 3.5
    compute = [{**r, "client_compute_seconds": 2 * r["round_seconds"]} for r in timed]
    assert report.steady_seconds(compute, "client_compute_seconds", skip_last=True) == 6.0


def test_mean_std_spread_and_formatting():
    assert report.mean_std([]) is None and report.mean_std([2.0]) == (2.0, 0.0)
    assert report.mean_std([1.0, 2.0, 3.0]) == (2.0, pytest.approx(1.0))  # sample std
    assert report.format_mean_std((70.0, 14.142), ".1f") == "70.0 ± 14.1" and report.format_mean_std(None, ".1f") == "–"
    assert report.spread([0.5], ".2f") == "0.50" and report.spread([1.0, 3.0], ".1f") == "2.0 ± 1.4"
    assert report.spread([], ".1f") == "–" and report.fmt(None, ".2f") == "–" and report.fmt(0.125, ".2f") == "0.12"


def seed_run(final: float, reached: int | None, curve: list) -> dict:
    return {"status": "completed", "final_acc": final, "best_acc": final, "s_per_round": 1.0,
            "mb_per_client_round": 0.5, "rounds_to": {"0.5": reached, "0.9": None}, "curve": curve}  # fmt: skip


def test_over_seeds_leaves_out_a_diverged_seed_and_shows_k_of_n():
    runs = [seed_run(0.8, 3, [(1, 0.5), (2, 0.8)]), seed_run(0.6, None, [(1, 0.4), (2, 0.6)]),
            {"status": "diverged"}]  # fmt: skip
    row = report.over_seeds(runs, TARGETS, ("final_acc", "s_per_round"))
    assert row["seeds"] == "2/3"
    assert row["final_acc"] == (pytest.approx(0.7), pytest.approx(math.sqrt(0.02)))
    assert row["s_per_round"] == (1.0, 0.0)
    assert row["rounds_to_0.5"] == ((3, 0.0), 1, 2)  # over the completed seeds that reached it: 1 of 2
    assert row["rounds_to_0.9"] == (None, 0, 2)
    assert len(row["curves"]) == 2  # the diverged seed draws nothing
    nothing = report.over_seeds([{"status": "failed"}], TARGETS, ("final_acc",))
    assert nothing["seeds"] == "0/1" and nothing["final_acc"] is None


def test_run_summary_reads_a_results_folder(tmp_path):
    summary = {"status": "completed", "rounds_completed": 3, "final_accuracy": 0.4, "best_accuracy": 0.4,
               "final_loss": 1.2, "rounds_to_target": {"0.5": None, "0.9": None},
               "communication_vectors_per_client": 12, "communication_bytes_per_client": 3e6}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    lines = [{**r, "client_compute_seconds": 1.0} for r in rows(9.0, 1.0, 3.0)]
    (tmp_path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    run = report.run_summary(tmp_path, TARGETS)
    assert run["status"] == "completed" and run["rounds"] == 3 and run["final_loss"] == 1.2
    assert run["s_per_round"] == 2.0 and run["client_compute_s_per_round"] == 1.0
    assert run["vectors_per_client_round"] == 4.0 and run["mb_per_client_round"] == 1.0
    assert run["rounds_to"] == {"0.5": None, "0.9": None} and run["final_rel_err"] is None
    assert run["curve"][0] == (0, 0.1) and not run["curve_is_error"]
    assert report.run_status(tmp_path) == "completed" and report.run_status(tmp_path / "missing") == "failed"


def test_run_summary_curve_is_the_relative_error_without_accuracy(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "diverged", "final_relative_error": 2.0}))
    errors = [{"round": r, "relative_error": 1.0 + r} for r in range(3)]
    (tmp_path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in errors))
    run = report.run_summary(tmp_path, TARGETS)
    assert run["status"] == "diverged" and run["curve_is_error"] and run["curve"] == [(0, 1.0), (1, 2.0), (2, 3.0)]


def test_write_csv_keeps_the_given_columns(tmp_path):
    report.write_csv(tmp_path / "a.csv", [{"b": 1, "a": 2, "extra": 3}, {"a": 4}], ("a", "b"))
    assert (tmp_path / "a.csv").read_text().splitlines() == ["a,b", "2,1", "4,"]
    report.write_csv(tmp_path / "b.csv", [{"x": None, "y": "v"}])
    assert (tmp_path / "b.csv").read_text().splitlines() == ["x,y", ",v"]
    report.write_csv(tmp_path / "empty.csv", [])
    assert (tmp_path / "empty.csv").read_text().splitlines() == ["algorithm"]


def test_markdown_table():
    assert report.markdown_table(["a", "b"], [["1", "2"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |"]


def test_plot_draws_bands_and_skips_empty_series(tmp_path):
    band = report.Line("two seeds", [[(0, 0.1), (1, 0.5), (2, 0.7)], [(0, 0.1), (1, 0.3)]])
    panels = [report.Panel([band, report.Line("no curve", [[]])], title="t"),
              report.Panel([report.Line("one", [[(1, 1e-3), (2, 1e-4)]], "--", 3)], yscale="log", legend_size=None),
              report.Panel([])]  # fmt: skip
    report.plot(tmp_path / "p.png", panels, figsize=(12, 4))
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_sweep_files_have_their_columns_and_k_of_n(tmp_path):
    runs = [seed_run(0.8, 3, [(1, 0.8)]), seed_run(0.6, None, [(1, 0.6)]), {"status": "diverged"}]
    row = {"algorithm": "fedavg", "grid": "lr=0.1", **report.over_seeds(runs, TARGETS, sweep.METRICS)}
    text = sweep.write_report(tmp_path, [row], TARGETS, "python -m simulation.sweep …", "title")
    # the mean with its 95 % interval: 0.7 ± t_{0.975,1} · 0.1414 / √2 = 0.7 ± 1.2706; one seed reached 0.5
    assert "| fedavg | lr=0.1 | 2/3 | 0.7000 [-0.5706, 1.9706] |" in text and "| 3.0 (1/2) | – |" in text
    with open(tmp_path / "sweep.csv") as f:
        reader = csv.DictReader(f)
        line = next(reader)
    assert reader.fieldnames[:11] == ["algorithm", "grid", "seeds", "final_acc_mean", "final_acc_std", "best_acc_mean",
                                      "best_acc_std", "s_per_round_mean", "mb_per_client_round_mean",
                                      "rounds_to_0.5_mean", "rounds_to_0.9_mean"]  # fmt: skip
    assert reader.fieldnames[11:15] == ["final_acc_ci_low", "final_acc_ci_high", "best_acc_ci_low", "best_acc_ci_high"]
    assert float(line["final_acc_ci_low"]) == pytest.approx(0.7 - 12.706205 * math.sqrt(0.02) / math.sqrt(2))
    assert line["reached_0.5"] == "1" and line["rounds_to_0.5_ci_low"] == ""  # one seed: no interval
    assert line["seeds"] == "2/3" and float(line["final_acc_mean"]) == pytest.approx(0.7)
    assert line["rounds_to_0.5_mean"] == "3.0" and line["rounds_to_0.9_mean"] == ""
    assert (tmp_path / "sweep.png").stat().st_size > 1000


def test_a_federated_only_run_reports_the_clients_accuracy_as_its_final_and_best(tmp_path):
    from simulation.experiment.report import run_summary

    summary = {"status": "completed", "final_accuracy": None, "final_fed_accuracy": 0.6, "best_fed_accuracy": 0.7}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "rounds.jsonl").write_text(json.dumps({"round": 1, "fed_accuracy": 0.6}) + "\n")
    got = run_summary(tmp_path, [0.5])
    assert (got["final_acc"], got["best_acc"]) == (0.6, 0.7)
