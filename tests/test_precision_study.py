"""The precision study's report (simulation/studies/precision.py) on tiny study folders written by the suite's own
results writer (fedsuite/results/folder.py's RunRecorder), no training: the means and their 95 % intervals over
seeds, the paired differences bf16 − fp32 and batched − one at a time, the largest accuracy gap in a round, the
ratio of client training seconds, a run still running counted but not averaged, a reference run with another
protocol left out with its key named, and the plot written."""

from __future__ import annotations

import csv
import math
import statistics

import pytest

from fedsuite.results.folder import RunRecorder
from simulation.studies import precision as study

T1, T2 = 12.706205, 4.302653  # t_{0.975} with 1 and 2 degrees of freedom

# accuracy per round 1 … 4 (round 0 is 0.1 everywhere)
FP32 = {0: [0.70, 0.76, 0.81, 0.82], 1: [0.60, 0.70, 0.77, 0.80], 2: [0.74, 0.78, 0.79, 0.83]}
BF16 = {0: [0.70, 0.75, 0.81, 0.83], 1: [0.61, 0.70, 0.76, 0.80], 2: [0.74, 0.78]}  # seed 2 still running
SINGLE = {0: [0.70, 0.76, 0.80, 0.82], 1: [0.60, 0.71, 0.77, 0.81], 2: [0.74, 0.78, 0.79, 0.83]}
REFERENCE = {0: [0.70, 0.76, 0.81, 0.81], 1: [0.60, 0.70, 0.77, 0.79]}  # seed 1 ran with another lr
OTHER_SWEEP = [0.5, 0.5, 0.5, 0.5]  # the reference's other sweep: same algorithm and seed, another relaxed-init
COMPUTE = {"none": 2.0, "bf16": 1.5}  # client training seconds per round


def write_run(root, seed, accuracies, batched=True, autocast="none", algorithm="fedavg", lr=0.05, sweep=None, **more):
    config = {"algorithm": algorithm, "seed": seed, "lr": lr, "batch-clients": batched, "autocast": autocast,
              "out-dir": str(root), **more}  # fmt: skip
    if not batched:
        config.pop("autocast")  # an older run's config: no autocast key (it trained in float32)
    grid = f"autocast={autocast}" if batched else ",".join(f"{k}={v}" for k, v in more.items()) or "default"
    folder = (root / sweep if sweep else root) / "runs" / algorithm / grid / f"seed-{seed}"
    recorder = RunRecorder(folder, config, {}, [0.75, 0.8], 4)
    recorder.record({"round": 0, "loss": 2.3, "accuracy": 0.1})
    seconds = COMPUTE[autocast] * (1 + seed / 10)
    for n, accuracy in enumerate(accuracies, 1):
        recorder.record({"round": n, "loss": 1 - accuracy, "accuracy": accuracy, "round_seconds": 1.0,
                         "client_compute_seconds": seconds})  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The report over a study (batched fp32 and bf16 of FedAvg, one-at-a-time fp32 in a second sweep) and a
    reference study; table.csv's and paired.csv's rows, paired.md, and the output folder."""
    tmp = tmp_path_factory.mktemp("precision-study")
    root, reference, out = tmp / "study", tmp / "cpu-study", tmp / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RunRecorder, "plot", lambda self: None)  # each run's own accuracy.png is not tested here
        for seed in range(3):
            write_run(root, seed, FP32[seed])
            write_run(root, seed, BF16[seed], autocast="bf16")
            write_run(root, seed, SINGLE[seed], batched=False, sweep="one-at-a-time", lr=0.05 if seed < 2 else 0.1)
        for seed, accuracies in REFERENCE.items():
            write_run(reference, seed, accuracies, batched=False, lr=0.05 if seed == 0 else 0.1)
        write_run(reference, 0, OTHER_SWEEP, batched=False, sweep="relaxed-init", **{"relaxed-init": 0.1})
        write_run(reference, 0, FP32[0], batched=False, algorithm="fedprox")  # not in the study: not read
        assert study.main(["--study", str(root), "--reference", str(reference), "--out", str(out)]) == 0
    with open(out / "table.csv") as f:
        table = {(r["algorithm"], r["setting"]): r for r in csv.DictReader(f)}
    with open(out / "paired.csv") as f:
        paired = {(r["algorithm"], r["comparison"]): r for r in csv.DictReader(f)}
    return table, paired, (out / "paired.md").read_text(), out


def close(cell: str, value: float) -> bool:
    return math.isclose(float(cell), value, rel_tol=1e-9, abs_tol=1e-12)


def test_settings_over_seeds(written):
    table, _, _, _ = written
    assert set(table) == {("fedavg", "batched, fp32"), ("fedavg", "batched, bf16"),
                          ("fedavg", "one at a time, fp32"), ("fedavg", "one at a time, fp32 (cpu-study)")}  # fmt: skip
    row = table[("fedavg", "batched, fp32")]
    finals = [FP32[s][-1] for s in range(3)]
    half = T2 * statistics.stdev(finals) / math.sqrt(3)
    assert (row["completed"], row["runs"]) == ("3", "3")
    assert close(row["final_acc_mean"], statistics.mean(finals))
    assert close(row["final_acc_ci_low"], statistics.mean(finals) - half)
    assert close(row["rounds_to_0.75_mean"], (2 + 3 + 2) / 3) and row["reached_0.75"] == "3"
    assert close(row["compute_s_mean"], statistics.mean(2.0 * (1 + s / 10) for s in range(3)))


def test_a_run_still_running_is_counted_not_averaged(written):
    table, paired, _, _ = written
    row = table[("fedavg", "batched, bf16")]
    assert (row["completed"], row["runs"]) == ("2", "3")
    assert close(row["final_acc_mean"], (BF16[0][-1] + BF16[1][-1]) / 2)
    assert paired[("fedavg", "bf16 − fp32, batched")]["pairs"] == "2"


def test_bf16_minus_fp32_seed_by_seed(written):
    _, paired, text, _ = written
    row = paired[("fedavg", "bf16 − fp32, batched")]
    diffs = [BF16[s][-1] - FP32[s][-1] for s in (0, 1)]
    assert close(row["final_acc_diff_mean"], statistics.mean(diffs))
    assert close(row["final_acc_diff_ci_high"], statistics.mean(diffs) + T1 * statistics.stdev(diffs) / math.sqrt(2))
    best = [max(BF16[s]) - max(FP32[s]) for s in (0, 1)]
    assert close(row["best_acc_diff_mean"], statistics.mean(best))
    # rounds to 0.75: seed 0 at 2 both; seed 1 at 3 both; to 0.8: seed 0 at 3 both, seed 1 at 4 both
    assert close(row["rounds_to_0.75_diff_mean"], 0.0) and row["rounds_to_0.75_pairs"] == "2"
    gap = max(abs(a - b) for s in (0, 1) for a, b in zip(BF16[s], FP32[s], strict=True))
    assert close(row["largest_gap"], gap)
    assert close(row["compute_ratio"], 0.75)  # 1.5 / 2.0 in every seed
    assert "| fedavg | bf16 − fp32, batched | 2 |" in text
    assert "×0.75 [0.75, 0.75]" in text


def test_batched_against_one_at_a_time_over_the_same_protocol(written):
    _, paired, text, _ = written
    row = paired[("fedavg", "batched − one at a time, fp32")]
    diffs = [FP32[s][-1] - SINGLE[s][-1] for s in (0, 1)]
    assert row["pairs"] == "2"
    assert close(row["final_acc_diff_mean"], statistics.mean(diffs))
    assert close(row["largest_gap"], 0.01)
    assert "seed 2 left out, the runs differ in lr" in text


def test_only_reference_runs_with_the_studys_protocol_are_read(written, capsys):
    table, paired, _, _ = written
    row = table[("fedavg", "one at a time, fp32 (cpu-study)")]
    assert (row["completed"], row["runs"]) == ("1", "1")  # seed 1's other lr and the relaxed-init sweep: not read
    assert close(row["final_acc_mean"], REFERENCE[0][-1])
    pair = paired[("fedavg", "batched − one at a time (cpu-study), fp32")]
    assert pair["pairs"] == "1"
    assert close(pair["final_acc_diff_mean"], FP32[0][-1] - REFERENCE[0][-1])
    assert pair["final_acc_diff_ci_low"] == ""  # one pair: no interval
    assert not any(a == "fedprox" for a, _ in paired)


def test_the_plots_are_written(written):
    *_, out = written
    for name in ("accuracy.png", "difference.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_difference_curves_are_per_seed_over_the_same_protocol():
    def run(seed, curve, lr=0.05):
        return {"seed": seed, "status": "completed", "curve": curve, "config": {"algorithm": "fedavg", "lr": lr}}

    mine = [run(0, [(0, 0.1), (5, 0.7), (10, 0.8)]), run(1, [(0, 0.1), (5, 0.6)]), run(2, [(5, 0.5)], lr=0.1)]
    base = [run(0, [(0, 0.1), (5, 0.65), (10, 0.82)]), run(1, [(0, 0.1), (5, 0.6)]), run(2, [(5, 0.4)])]
    curves = study.difference_curves(mine, base)
    assert len(curves) == 2  # seed 2's runs differ in lr
    assert [n for n, _ in curves[0]] == [5, 10] and curves[1] == [(5, 0.0)]
    assert math.isclose(curves[0][0][1], 0.05) and math.isclose(curves[0][1][1], -0.02)


def test_no_runs_is_an_error(tmp_path, capsys):
    assert study.main(["--study", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no runs" in capsys.readouterr().err


def test_gradient_check_bf16_applies_stacked_and_one_at_a_time():
    """Stacked float32 gradients equal one-at-a-time ones to float32 rounding; under bf16 autocast both paths carry
    bf16 rounding (far from float64), the stacked one included: autocast applies under vmap."""
    check = study.gradient_check(clients=3, batch=8)
    assert check["fp32"]["stacked_vs_one"] < 1e-5
    assert check["fp32"]["one_at_a_time"] < 1e-5
    assert check["bf16"]["one_at_a_time"] > 1e-3
    assert check["bf16"]["stacked"] > 1e-3
    assert check["bf16"]["stacked"] < 0.5  # rounding, not another gradient


def test_gradients_flag_prints_the_table(capsys):
    assert study.main(["--gradients"]) == 0
    assert "| bf16 |" in capsys.readouterr().out


def test_no_seconds_ratio_against_another_study(written):
    _, paired, _, _ = written
    assert paired[("fedavg", "batched − one at a time (cpu-study), fp32")]["compute_ratio"] == ""
    assert close(paired[("fedavg", "batched − one at a time, fp32")]["compute_ratio"], 1.0)
