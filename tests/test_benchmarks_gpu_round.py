"""The round benchmarks run on a CPU with tiny settings: every path prints its line, and the paths did the same work."""

from __future__ import annotations

import json

import pytest

from simulation.benchmarks import gpu_round, peers
from simulation.benchmarks.fake_cifar import write_fake_cifar10

TINY = ["--model", "cnn", "--clients", "2", "--steps", "2", "--rounds", "2", "--device", "cpu", "--samples", "60"]


def test_gpu_round_prints_every_path_and_the_suite_does_the_bare_loops_work(tmp_path, capsys):
    out = tmp_path / "round.json"
    assert gpu_round.main([*TINY, "--algorithms", "fedavg,fedspeed", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("device cpu, torch ")
    for algorithm, rule in (("fedavg", "sgd"), ("fedspeed", "sam")):
        assert any(line.startswith(f"{algorithm:<9} suite: ") for line in lines)
        assert any(line.startswith(f"{algorithm:<9} batched: ") for line in lines)  # measured, or "not available (…)"
        assert any(line.startswith(f"{algorithm:<9} bare ({rule} loop): ") for line in lines)
        assert any(line.startswith(f"{algorithm:<9} suite/bare ") for line in lines)
    report = json.loads(out.read_text())
    fedavg = report["algorithms"]["fedavg"]
    assert fedavg["train_loss_max_abs_diff_bare"] < 1e-6  # the same data, order, model and mean: the same losses
    if "steady_s" in fedavg["batched"]:
        assert fedavg["train_loss_max_abs_diff_batched"] < 1e-4
    worst = max(entry["suite_over_bare"] for entry in report["algorithms"].values())
    assert lines[-1] == f"gpu_suite_ratio {worst:.3f}"


def test_gpu_round_reads_a_given_data_folder_and_refuses_a_bad_algorithm(tmp_path, capsys):
    write_fake_cifar10(tmp_path, train_rows=120, test_rows=20)
    with pytest.raises(SystemExit) as stop:
        gpu_round.main([*TINY, "--data-dir", str(tmp_path), "--algorithms", "fedavgg"])
    assert stop.value.code == 2 and "algorithm" in capsys.readouterr().err


def test_peers_prints_both_apps_and_the_ratio(tmp_path, capsys):
    out = tmp_path / "peers.json"
    assert peers.main([*TINY, "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("fedsuite: ") for line in lines)
    assert any(line.startswith("plain Flower (quickstart-style NumPyClient): ") for line in lines)
    report = json.loads(out.read_text())
    assert len(report["fedsuite"]["seconds"]) == len(report["plain_flower"]["seconds"]) == 2
    assert lines[-1] == f"peers_ratio {report['peers_ratio']:.3f}"


def test_a_batched_row_that_fell_back_says_so(tmp_path):
    """A batched path whose clients trained one at a time (here: dp-sgd clips per record) reports why, so its figure
    is never read as batching's."""
    import argparse

    write_fake_cifar10(tmp_path, train_rows=120, test_rows=20)
    args = argparse.Namespace(model="cnn", clients=2, steps=2, batch=10, rounds=2, device="cpu", host_memory="reuse")
    run_config = {**gpu_round.reference_config(args, "fedavg", str(tmp_path)), **gpu_round.BATCHED,
                  "dp-sgd": True, "dp-sgd-noise": 0.0, "dp-sgd-clip": 1e6}  # fmt: skip
    result = gpu_round.suite_path(run_config, gpu_round.torch.device("cpu"))
    assert result["fell_back"] == ["fedavg trains one client at a time: dp-sgd clips per-record gradients one client "
                                   "at a time"]  # fmt: skip
    plain = gpu_round.suite_path({**run_config, "batch-clients": False}, gpu_round.torch.device("cpu"))
    assert plain["fell_back"] == []


def test_batching_bound_prints_the_three_gradients_and_its_ratios(capsys):
    from simulation.benchmarks import batching_bound

    argv = ["--model", "cnn", "--device", "cpu", "--clients", "3", "--batch", "4", "--repeats", "2"]
    assert batching_bound.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("one at a time (3 × batch 4): ") and lines[2].startswith("one model, batch 12: ")
    assert lines[3].startswith("stacked (vmap over 3 clients): ")
    ms = [float(line.rsplit(": ", 1)[1].removesuffix(" ms")) for line in lines[1:4]]
    ratios = {line.split()[0]: float(line.split()[1]) for line in lines[-3:]}
    assert ratios["grad_max_abs_diff"] < 1e-5  # the stacked path computed each client's own gradient
    assert ratios["stacked_ratio"] == pytest.approx(ms[2] / ms[0], abs=0.01, rel=0.05)
    assert ratios["batching_bound"] == pytest.approx(ms[1] / ms[0], abs=0.01, rel=0.05)
    assert lines[-1].startswith("batching_bound ")


def test_round_phases_times_every_phase_of_every_round_and_puts_the_functions_back(capsys):
    from simulation.benchmarks import round_phases

    originals = [getattr(owner, name) for owner, name, *_ in round_phases.TIMED]
    assert round_phases.main([*TINY]) == 0
    assert [getattr(owner, name) for owner, name, *_ in round_phases.TIMED] == originals
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("fedavg batched on cpu; round seconds ")
    rounds = [line for line in lines if line.startswith("round ")]
    assert [line.split(":")[0] for line in rounds] == ["round 1", "round 2"]
    for line in rounds:  # the CPU phases of a batched round (no recording on a CPU)
        for phase in ("configure_fit", "prepare", "train_stacked", "finish", "to_host", "aggregate_fit", "consistency"):
            assert f" {phase} " in line, (phase, line)
    assert lines[-1].startswith("steady_s ")


def test_round_phases_refuses_a_bad_algorithm_before_training(capsys):
    from simulation.benchmarks import round_phases

    with pytest.raises(SystemExit) as stop:
        round_phases.main([*TINY, "--algorithm", "fedavgg"])
    assert stop.value.code == 2 and "algorithm" in capsys.readouterr().err


def test_round_phases_says_when_a_batched_run_trained_one_at_a_time(capsys):
    from simulation.benchmarks import round_phases

    assert round_phases.main([*TINY, "--model", "tests.test_user_models:small_bn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("fell back to one at a time: ") and "BatchNorm" in lines[1], lines[:3]
