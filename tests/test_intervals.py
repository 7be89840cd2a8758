"""95 % intervals over seeds and paired differences against a baseline: the t arithmetic against hand computations,
the verdict words, one seed without an interval, and a sweep whose sweep.md shows both."""

from __future__ import annotations

import csv
import json
import math

import pytest

from fedsuite.config.run_config import ConfigError
from simulation import sweep
from simulation.experiment import intervals, paired, report

SETTING = "dataset='synthetic-logistic' num-clients=6 clients-per-round=3 num-server-rounds=2 targets='0.5'"


def test_t_quantiles_are_the_known_values():
    assert intervals.t_quantile(1) == pytest.approx(12.7062, abs=1e-4)
    assert intervals.t_quantile(2) == pytest.approx(4.3027, abs=1e-4)
    assert intervals.t_quantile(9) == pytest.approx(2.2622, abs=1e-4)
    assert intervals.t_quantile(30) == pytest.approx(2.0423, abs=1e-4)
    assert intervals.t_quantile(60) == pytest.approx(2.0003, abs=1e-4)  # beyond the table: the expansion
    assert intervals.t_quantile(120) == pytest.approx(1.9799, abs=1e-4)
    assert intervals.t_quantile(10**6) == pytest.approx(1.95996, abs=1e-5)  # the normal quantile in the limit
    with pytest.raises(ValueError, match="at least 1"):
        intervals.t_quantile(0)


def test_t_quantiles_match_scipy_where_it_is_installed():
    stats = pytest.importorskip("scipy.stats")
    for df in (*range(1, 61), 75, 100, 250, 1000):
        assert intervals.t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-5)


def test_interval_of_three_seeds_by_hand():
    value = intervals.t_interval([0.80, 0.82, 0.81])  # mean 0.81, s = 0.01, t_{0.975,2} = 4.3027
    assert value.mean == pytest.approx(0.81) and value.n == 3
    assert value.half == pytest.approx(4.302653 * 0.01 / math.sqrt(3))
    assert value.half == pytest.approx(0.02484, abs=1e-5)
    assert (value.low, value.high) == (pytest.approx(0.78516, abs=1e-5), pytest.approx(0.83484, abs=1e-5))
    assert intervals.format_interval(value, ".4f") == "0.8100 [0.7852, 0.8348]"


def test_one_seed_has_no_interval_and_none_has_nothing():
    one = intervals.t_interval([0.811])
    assert (one.mean, one.half, one.n, one.low, one.high) == (0.811, None, 1, None, None)
    assert intervals.format_interval(one, ".4f") == "0.8110 (n = 1)"
    assert intervals.t_interval([]) is None and intervals.format_interval(None, ".4f") == "–"
    row = report.over_seeds([seed_run(0, 0.8, 3)], [0.5], sweep.METRICS)
    assert intervals.format_interval(row["intervals"]["final_acc"], ".4f") == "0.8000 (n = 1)"


def test_paired_differences_over_the_seeds_both_hold_and_the_verdicts():
    base = {0: 0.80, 1: 0.82, 2: 0.81, 3: None}
    other = {0: 0.83, 1: 0.86, 2: 0.84, 3: 0.90, 4: 0.95}  # seed 3: the base has none; seed 4: only here
    diff = intervals.paired(base, other)  # differences 0.03, 0.04, 0.03
    s = math.sqrt(((0.03 - 0.1 / 3) ** 2 * 2 + (0.04 - 0.1 / 3) ** 2) / 2)
    assert diff.n == 3 and diff.mean == pytest.approx(0.1 / 3) and diff.half == pytest.approx(4.302653 * s / 3**0.5)
    assert intervals.verdict(diff) == "better" and intervals.verdict(diff, higher_is_better=False) == "worse"
    assert intervals.format_difference(diff, ".4f") == "+0.0333 [+0.0190, +0.0477] better"
    worse = intervals.paired(other, base)
    assert intervals.verdict(worse) == "worse" and intervals.verdict(worse, higher_is_better=False) == "better"
    mixed = intervals.paired({0: 0.80, 1: 0.82, 2: 0.81}, {0: 0.81, 1: 0.81, 2: 0.83})  # +0.01, −0.01, +0.02
    assert mixed.low < 0 < mixed.high and intervals.verdict(mixed) == "not distinguishable"
    same = intervals.paired({0: 5, 1: 6}, {0: 5, 1: 6})  # no difference at all: [0, 0] holds 0
    assert intervals.verdict(same) == "not distinguishable"
    one = intervals.paired({0: 0.8}, {0: 0.9})
    assert intervals.verdict(one) == "" and intervals.format_difference(one, ".2f") == "+0.10 (n = 1)"
    assert intervals.paired({0: 0.8}, {1: 0.9}) is None and intervals.format_difference(None, ".2f") == "–"


def test_the_baseline_is_fedavg_when_it_runs_or_the_one_named():
    assert paired.choose_baseline(["scaffold", "fedavg"], None) == "fedavg"
    assert paired.choose_baseline(["scaffold", "feddyn"], None) is None
    assert paired.choose_baseline(["scaffold", "feddyn"], "feddyn") == "feddyn"
    with pytest.raises(ConfigError, match=r"--baseline fedprox: not among --algorithms \(scaffold, feddyn\)"):
        paired.choose_baseline(["scaffold", "feddyn"], "fedprox")


def seed_run(seed: int, final: float, reached: int | None, status: str = "completed") -> dict:
    return {"status": status, "seed": seed, "final_acc": final, "best_acc": final + 0.01, "s_per_round": 1.0,
            "mb_per_client_round": 0.5, "rounds_to": {"0.5": reached}, "mb_to": {"0.5": reached and reached * 1.0},
            "curve": [(1, final)]}  # fmt: skip


def test_paired_rows_pair_the_seeds_both_completed_at_the_same_grid_point():
    def row(algorithm, grid, runs):
        return {"algorithm": algorithm, "grid": grid, **report.over_seeds(runs, [0.5], sweep.METRICS)}

    diverged = seed_run(2, 0.0, 9, "diverged")
    rows = [row("fedavg", "lr=0.1", [seed_run(0, 0.80, 4), seed_run(1, 0.82, 5), seed_run(2, 0.81, None)]),
            row("fedavg", "lr=0.2", [seed_run(0, 0.70, None), seed_run(1, 0.70, None), seed_run(2, 0.70, None)]),
            row("scaffold", "lr=0.1", [seed_run(0, 0.83, 3), seed_run(1, 0.86, 3), diverged])]  # fmt: skip
    (only,) = paired.paired_rows(rows, [0.5], "fedavg")
    assert (only["algorithm"], only["grid"], only["base_grid"], only["pairs"]) == ("scaffold", "lr=0.1", "lr=0.1", 2)
    assert only["final_acc"].mean == pytest.approx(0.035) and only["final_acc"].n == 2  # seed 2 diverged: unpaired
    assert only["rounds_to_0.5"].mean == pytest.approx(-1.5)  # (3 − 4, 3 − 5): fewer rounds
    text = "\n".join(paired.markdown([only], [0.5], "fedavg"))
    assert "| scaffold | lr=0.1 | 2 | +0.0350 [" in text and "(2/2) |" in text and "Δ vs fedavg" in text
    # tune's final runs: each algorithm at its own tuned values, paired with the baseline's only grid point
    (tuned,) = paired.paired_rows([rows[0], {**rows[2], "grid": "lr=0.05"}], [0.5], "fedavg")
    assert tuned["base_grid"] == "lr=0.1" and tuned["pairs"] == 2
    assert "| scaffold | lr=0.05 (fedavg: lr=0.1) | 2 |" in "\n".join(paired.markdown([tuned], [0.5], "fedavg"))
    fields, lines = paired.csv_rows([only], [0.5], "fedavg")[::-1]
    assert lines[0]["final_acc_verdict"] == "not distinguishable"  # +0.035 ± 12.706 · 0.0071 / √2 holds 0
    assert lines[0]["rounds_to_0.5_pairs"] == 2 and "final_acc_diff_ci_low" in fields


def test_run_summary_counts_the_mb_up_to_each_target(tmp_path):
    summary = {"status": "completed", "rounds_completed": 3, "final_accuracy": 0.6, "best_accuracy": 0.6,
               "rounds_to_target": {"0.5": 2, "0.9": None}}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    rows = [{"round": 0, "accuracy": 0.1}] + [{"round": r, "accuracy": 0.2 * r, "bytes_down_per_client": 1e6,
                                               "bytes_up_per_client": 2e6} for r in (1, 2, 3)]  # fmt: skip
    (tmp_path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert report.run_summary(tmp_path, [0.5, 0.9])["mb_to"] == {"0.5": 6.0, "0.9": None}


def test_the_sweep_plot_band_is_the_interval_of_the_mean():
    curves = [[(1, 0.80)], [(1, 0.82)], [(1, 0.81)]]
    xs, mean, low, high = report._band(curves, "interval")
    assert xs == [1] and mean == [pytest.approx(0.81)]
    assert (low[0], high[0]) == (pytest.approx(0.81 - 0.024841, abs=1e-6), pytest.approx(0.81 + 0.024841, abs=1e-6))
    assert report._band(curves) == ([1], [pytest.approx(0.81)], [0.80], [0.82])  # the default: min–max


def test_a_sweep_shows_intervals_and_the_paired_table(tmp_path, capsys):
    argv = ["--algorithms", "fedavg,losac", "--seeds", "0,1,2", "-c", SETTING, "--engine", "inprocess",
            "--out", str(tmp_path)]  # fmt: skip
    assert sweep.main(argv) == 0
    text = (tmp_path / "sweep.md").read_text()
    finals = {(a, s): json.loads((tmp_path / f"runs/{a}/default/seed-{s}/summary.json").read_text())["final_accuracy"]
              for a in ("fedavg", "losac") for s in (0, 1, 2)}  # fmt: skip
    mine = intervals.t_interval([finals["fedavg", s] for s in (0, 1, 2)])
    assert f"| fedavg | default | 3/3 | {intervals.format_interval(mine, '.4f')} |" in text
    diff = intervals.paired({s: finals["fedavg", s] for s in (0, 1, 2)}, {s: finals["losac", s] for s in (0, 1, 2)})
    assert "Δ vs fedavg" in text and f"| losac | default | 3 | {intervals.format_difference(diff, '.4f')} |" in text
    assert "MB to 0.5" in text
    with open(tmp_path / "sweep-paired.csv") as f:
        (line,) = list(csv.DictReader(f))
    assert (line["algorithm"], line["baseline"], line["pairs"]) == ("losac", "fedavg", "3")
    assert float(line["final_acc_diff_mean"]) == pytest.approx(diff.mean)
    assert float(line["final_acc_diff_ci_low"]) == pytest.approx(diff.low)
    assert line["final_acc_verdict"] == intervals.verdict(diff)
    capsys.readouterr()
    # the other way round: the runs are reused, losac is the baseline
    assert sweep.main([*argv, "--baseline", "losac"]) == 0
    assert "| fedavg | default | 3 |" in (tmp_path / "sweep.md").read_text().split("Δ vs losac")[1]


def test_a_baseline_not_in_the_sweep_is_refused_before_any_run(tmp_path, capsys):
    argv = ["--algorithms", "fedavg,losac", "--seeds", "0", "-c", SETTING, "--engine", "inprocess",
            "--out", str(tmp_path), "--baseline", "scaffold"]  # fmt: skip
    assert sweep.main(argv) == 2
    assert "--baseline scaffold: not among --algorithms (fedavg, losac)" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
