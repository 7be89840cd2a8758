"""The compression study's report (simulation/studies/compression.py) on a tiny study folder written by the suite's
own results writer (fedsuite/results/folder.py's RunRecorder), no training: megabytes to a target, the means and
their 95 % intervals over seeds, the paired differences against the same algorithm uncompressed, a run that did
not complete counted but not averaged, a second folder of the same run skipped, and the plot written."""

from __future__ import annotations

import csv
import math
import statistics

import numpy as np
import pytest

from fedsuite.results.folder import RunRecorder
from simulation.studies import compression as study

D = 1000  # the model's d: top-k with k = 10 keeps 1 %
MB = 1e6  # bytes
T2, T3 = 12.706205, 4.302653  # t_{0.975} with 1 and 2 degrees of freedom


def write_run(root, sweep, seed, accuracies, up, rounds=4, status=None, algorithm="fedavg", **compression):
    """A results folder with one row per round (round 0, then `accuracies`, each round sending `up` bytes up and
    1 MB down); `status` ends it early (diverged), and a run with fewer rows than `rounds` and no status is still
    running."""
    config = {"algorithm": algorithm, "seed": seed, "compress-up": "none", "compress-feedback": "none", **compression}
    grid = f"compress-feedback={config['compress-feedback']}" if config["compress-up"] != "none" else "default"
    folder = root / sweep / "runs" / algorithm / grid / f"seed-{seed}"
    recorder = RunRecorder(folder, config, {}, [0.75, 0.8], rounds, initial_model=np.zeros(D, np.float32))
    recorder.record({"round": 0, "loss": 2.3, "accuracy": 0.1})
    for n, accuracy in enumerate(accuracies, 1):
        recorder.record({"round": n, "loss": 1 - accuracy, "accuracy": accuracy, "bytes_up_per_client": up,
                         "bytes_down_per_client": MB})  # fmt: skip
    if status:
        recorder.finish(status, "the loss grew past divergence-factor")


TOPK = {"compress-up": "topk", "compress-up-k": 10}
PLAIN = {0: [0.70, 0.76, 0.81, 0.82], 1: [0.60, 0.70, 0.77, 0.80], 2: [0.74, 0.78, 0.79, 0.83]}
TOPK_OFF = {0: [0.65, 0.72, 0.76, 0.79], 1: [0.60, 0.68, 0.72, 0.74]}  # seed 1 never reaches 0.75
TOPK_ON = {0: [0.72, 0.77, 0.80, 0.83], 1: [0.70, 0.74, 0.78, 0.79], 2: [0.76, 0.79, 0.81, 0.82]}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The study folder and what the report wrote of it (once for the module): table.md, table.csv's rows by
    (algorithm, setting, feedback) and paired.md."""
    tmp_path = tmp_path_factory.mktemp("compression-study")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RunRecorder, "plot", lambda self: None)  # each run's own accuracy.png is not tested here
        return write_study(tmp_path / "study", tmp_path / "out")


def write_study(root, out):
    """Three seeds uncompressed, top-k with error feedback on and off (one seed diverged), a QSGD run still running,
    and a second folder of one run; the report over them."""
    for seed in range(3):
        write_run(root, "plain", seed, PLAIN[seed], up=MB)
        write_run(root, "topk-1pct", seed, TOPK_ON[seed], up=0.02 * MB, **TOPK, **{"compress-feedback": "ef"})
    for seed, accuracies in TOPK_OFF.items():
        write_run(root, "topk-1pct", seed, accuracies, up=0.02 * MB, **TOPK)
    write_run(root, "topk-1pct", 2, [0.5, 0.3], up=0.02 * MB, status="diverged", **TOPK)  # counted, not averaged
    write_run(root, "plain-again", 0, [0.9] * 4, up=MB)  # the same key as plain's seed 0: named and skipped
    write_run(root, "qsgd-4bit", 0, [0.7, 0.75], up=0.25 * MB, **{"compress-up": "qsgd", "compress-up-levels": 7})
    assert study.main(["--study", str(root), "--out", str(out)]) == 0
    with open(out / "table.csv", newline="") as f:
        rows = {(r["algorithm"], r["setting"], r["feedback"]): r for r in csv.DictReader(f)}
    return out, (out / "table.md").read_text(), rows, (out / "paired.md").read_text()


def interval(values, t):
    mean = statistics.fmean(values)
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def test_the_table_gives_megabytes_to_each_target_and_the_mean_with_its_interval(report):
    _, table, rows, _ = report
    plain = rows[("fedavg", "uncompressed", "none")]
    mean, low, high = interval([0.82, 0.80, 0.83], T3)
    assert float(plain["final_acc_mean"]) == pytest.approx(mean)
    assert (float(plain["final_acc_ci_low"]), float(plain["final_acc_ci_high"])) == pytest.approx((low, high))
    # 0.75 first reached in rounds 2, 3, 2: 2, 3 and 2 MB up, twice that up + down; 0.8 in rounds 3, 4, 4
    assert float(plain["mb_up_to_0.75_mean"]) == pytest.approx(7 / 3)
    assert float(plain["mb_up_down_to_0.75_mean"]) == pytest.approx(14 / 3)
    assert float(plain["mb_up_to_0.8_mean"]) == pytest.approx(11 / 3)
    assert float(plain["mb_up_to_0.8_ci_high"]) == pytest.approx(interval([3, 4, 4], T3)[2])
    assert (plain["reached_0.8"], plain["completed"], plain["runs"]) == ("3", "3", "3")
    assert float(plain["up_mb_per_round"]) == pytest.approx(1.0)
    assert "| fedavg | uncompressed | – | 3/3 | 0.8167 [" in table
    assert "| 2.33 [0.90, 3.77] (3/3) |" in table  # uplink MB to 0.75, three significant figures


def test_a_run_that_did_not_complete_is_counted_but_not_averaged(report):
    _, table, rows, _ = report
    off = rows[("fedavg", "top-k 1 %", "none")]
    assert (off["completed"], off["runs"]) == ("2", "3")  # the diverged seed 2 is counted
    mean, low, high = interval([0.79, 0.74], T2)
    assert float(off["final_acc_mean"]) == pytest.approx(mean)
    assert float(off["final_acc_ci_low"]) == pytest.approx(low)
    assert float(off["mb_up_to_0.75_mean"]) == pytest.approx(0.06)  # seed 0 only: 3 rounds of 0.02 MB
    assert off["mb_up_to_0.75_ci_low"] == "" and off["reached_0.75"] == "1"
    assert float(off["mb_up_down_to_0.75_mean"]) == pytest.approx(3.06)
    assert float(off["up_mb_per_round"]) == pytest.approx(0.02)
    accuracy = f"{mean:.4f} [{low:.4f}, {high:.4f}]"  # one seed reached 0.75 (0.06 MB), none 0.8
    assert f"| fedavg | top-k 1 % | off | 2/3 | {accuracy} | 0.0200 | 0.0600 (1/2) | – (0/2) |" in table
    assert "| fedavg | QSGD 4-bit | off | 0/1 (1 running) | – |" in table  # still running: counted, not averaged


def test_paired_differences_against_the_same_algorithm_uncompressed(report):
    *_, paired = report
    # EF off: seeds 0 and 1 pair and both lose (0.03 and 0.06); only seed 0 reaches 0.75 compressed: 0.06 MB
    # against 2 MB up, 3.06 against 4 MB up + down
    diff, diff_low, diff_high = interval([-0.03, -0.06], T2)
    assert f"| 2 | {diff:+.4f} [{diff_low:+.4f}, {diff_high:+.4f}] (worse, 2 seeds) | ×0.0300 (better, 1/2) |" in paired
    assert "×0.765 (better, 1/2) |" in paired
    # EF on: +0.01, -0.01, -0.01 (seeds disagree); uplink ratios 0.04/2, 0.06/3, 0.02/2, their geometric mean
    logs = [math.log(0.02), math.log(0.02), math.log(0.01)]
    mean, low, high = (math.exp(v) for v in interval(logs, T3))
    diff, diff_low, diff_high = interval([0.01, -0.01, -0.01], T3)
    line = next(x for x in paired.splitlines() if "| top-k 1 % | on |" in x)
    assert f"| {diff:+.4f} [{diff_low:+.4f}, {diff_high:+.4f}] (not shown, 3 seeds) |" in line
    assert f"| ×{mean:.4f} [{low:.4f}, {high:.4f}] (better, 3/3) |" in line
    assert "| fedavg | QSGD 4-bit | off | 0 | – | – (0/0) | – (0/0) |" in paired
    assert "uncompressed" not in paired


def test_the_plot_is_written(report):
    out, *_ = report
    assert (out / "accuracy-vs-mb.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "accuracy-vs-mb.png").stat().st_size > 10_000


def test_a_folder_without_runs_is_one_line_and_status_2(tmp_path, capsys):
    assert study.main(["--study", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_run_with_a_compressed_downlink_is_a_setting_of_its_own():
    from simulation.studies.compression_runs import Setting, setting_of

    up = {"compress-up": "topk", "compress-up-k": 1992}
    both = setting_of({**up, "compress-down": "topk", "compress-down-k": 1992})
    assert both != setting_of(up) and both.order > setting_of(up).order
    assert both.label(199_210) == "top-k 1 %, down: top-k 1 %"
    assert setting_of({"compress-up": "sign", "compress-down": "sign"}).label(None) == "sign, down: sign"
    assert setting_of({}) == Setting("none")


def test_without_its_initial_model_a_dense_broadcast_run_gives_d_from_its_rows(tmp_path):
    """Two vectors down of d float32 values each: d = bytes / (4 · vectors); a compressed broadcast does not say d."""
    from simulation.studies.compression_runs import dimension

    folder = tmp_path / "run"
    recorder = RunRecorder(folder, {"algorithm": "scaffold", "seed": 0}, {}, [0.75], 2)
    recorder.record({"round": 0, "loss": 2.3, "accuracy": 0.1})
    recorder.record({"round": 1, "loss": 1.0, "accuracy": 0.5, "bytes_down_per_client": 8.0 * D,
                     "vectors_down_per_client": 2.0})  # fmt: skip
    assert not (folder / "model-round-0.npy").exists()
    assert dimension(folder, {"compress-down": "none"}) == D
    assert dimension(folder, {"compress-down": "topk"}) is None
