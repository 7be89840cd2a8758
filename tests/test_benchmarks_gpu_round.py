"""The round benchmarks run on a CPU with tiny settings: every path prints its line, and the paths did the same work."""

from __future__ import annotations

import json
import math

import pytest

from simulation.benchmarks import gpu_round, peers
from simulation.benchmarks.fake_cifar import write_fake_cifar10

TINY = ["--model", "cnn", "--clients", "2", "--steps", "2", "--rounds", "2", "--device", "cpu", "--samples", "60"]


def test_gpu_round_prints_every_path_and_the_suite_does_the_bare_loops_work(tmp_path, capsys):
    out = tmp_path / "round.json"
    assert gpu_round.main([*TINY, "--algorithms", "fedavg,fedspeed", "--bound-repeats", "1", "--json", str(out)]) == 0
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
    # the card's bounds, in the same process: each rule's stacked and one-model step, eager on a CPU and said so
    figures = printed_figures(lines)
    for label in ("bound_s", "dense_s", "bound_sam_s", "dense_sam_s"):
        assert math.isfinite(figures[label]) and figures[label] > 0, label
        assert "run eagerly: no CUDA graphs on a CPU" in next(line for line in lines if line.startswith(f"{label} "))
    assert report["bounds"]["sgd"]["bound"]["seconds"] == pytest.approx(figures["bound_s"], abs=1e-3)
    for algorithm, rule in (("fedavg", ""), ("fedspeed", "_sam")):  # each batched row over its own rule's bounds
        entry = report["algorithms"][algorithm]
        if "steady_s" in entry["batched"]:
            ratios = bound_ratio_line(lines, algorithm)
            assert ratios["bound_ratio"] == pytest.approx(entry["bound_ratio"], abs=1e-3)
            assert entry["bound_ratio"] == pytest.approx(
                entry["batched"]["steady_s"] / figures[f"bound{rule}_s"], rel=1e-2
            )
            assert entry["dense_ratio"] == pytest.approx(
                entry["batched"]["steady_s"] / figures[f"dense{rule}_s"], rel=1e-2
            )


def printed_figures(lines: list[str]) -> dict[str, float]:
    """`name value  (…)` lines of the bounds → {name: value}."""
    return {
        line.split()[0]: float(line.split()[1]) for line in lines if line.split()[:1] and line.split()[0].endswith("_s")
    }


def bound_ratio_line(lines: list[str], algorithm: str) -> dict[str, float]:
    line = next(line for line in lines if line.startswith(f"{algorithm:<9} bound_ratio "))
    words = line.split()
    return {words[1]: float(words[2]), words[3]: float(words[4])}


def test_gpu_round_runs_only_the_paths_asked_for_with_a_variant_row_and_bf16(tmp_path, capsys):
    """--paths batched: no suite or bare row, so no gpu_suite_ratio; --variant adds a batched row and its ratio to
    the plain one; --autocast bf16 reaches the run config and the bounds."""
    out = tmp_path / "round.json"
    variant = "dp-sgd=true dp-sgd-noise=0.0 dp-sgd-clip=1e6"
    argv = [*TINY, "--batch", "8", "--algorithms", "fedavg", "--paths", "batched", "--variant", variant,
            "--autocast", "bf16", "--bound-repeats", "1", "--json", str(out)]  # fmt: skip
    assert gpu_round.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith(("fedavg    suite: ", "fedavg    bare ")) for line in lines)
    assert any(line.startswith(f"fedavg    batched ({variant}): ") for line in lines)
    assert lines[-1] == "gpu_suite_ratio n/a"
    report = json.loads(out.read_text())
    assert report["autocast"] == "bf16" and report["paths"] == ["batched"] and "sam" not in report["bounds"]
    assert "bf16 autocast" in next(line for line in lines if line.startswith("bound_s "))
    entry = report["algorithms"]["fedavg"]
    row = entry["variants"][variant]
    assert row["over_batched"] == pytest.approx(row["steady_s"] / entry["batched"]["steady_s"])
    assert f"fedavg    variant_over_batched {row['over_batched']:.3f}  ({variant})" in lines
    assert math.isfinite(entry["bound_ratio"]) and math.isfinite(entry["dense_ratio"])
    assert entry["suite_over_bare"] is None and report["gpu_suite_ratio"] is None


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--paths", "batched,sute"], "--paths"), (["--variant", "dp-sgd"], "--variant"),
     (["--variant", "dp-sgdd=true"], "dp-sgdd"), (["--autocast", "fp16"], "--autocast")],
)  # fmt: skip
def test_gpu_round_refuses_bad_paths_variants_and_autocast_before_training(flags, named, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_round.main([*TINY, "--algorithms", "fedavg", *flags])
    assert stop.value.code == 2 and named in capsys.readouterr().err


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
    """A batched path whose clients trained one at a time (here: a model with BatchNorm statistics, which each
    client's forward pass updates) reports why, so its figure is never read as batching's."""
    import argparse

    from fedsuite.batched.notice import BUFFERS

    write_fake_cifar10(tmp_path, train_rows=120, test_rows=20)
    args = argparse.Namespace(model="tests.test_user_models:small_bn", clients=2, steps=2, batch=10, rounds=2,
                              device="cpu", host_memory="reuse")  # fmt: skip
    run_config = {**gpu_round.reference_config(args, "fedavg", str(tmp_path)), **gpu_round.BATCHED}
    result = gpu_round.suite_path(run_config, gpu_round.torch.device("cpu"))
    assert result["fell_back"] == [f"fedavg trains one client at a time: {BUFFERS}"]
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


def test_round_phases_runs_several_algorithms_and_puts_each_round_over_its_training(tmp_path, capsys):
    from simulation.benchmarks import round_phases

    out = tmp_path / "phases.json"
    argv = [*TINY, "--batch", "8", "--algorithms", "scaffold,fadamgt", "--json", str(out)]
    assert round_phases.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    report = json.loads(out.read_text())["algorithms"]
    assert list(report) == ["scaffold", "fadamgt"]
    for algorithm, figures in report.items():
        assert any(line.startswith(f"{algorithm} batched on cpu; ") for line in lines)
        second = figures["rounds"][1]["phases"]
        assert figures["training_s"] == pytest.approx(second["train_stacked"])  # the median of rounds 2..R
        assert figures["round_over_training"] == pytest.approx(figures["round_s"] / figures["training_s"])
        assert f"{algorithm:<9} training {figures['training_s']:.3f} s  round {figures['round_s']:.3f} s  " \
               f"round_over_training {figures['round_over_training']:.3f}" in lines  # fmt: skip
    worst = max(figures["round_over_training"] for figures in report.values())
    assert lines[-1] == f"round_over_training_max {worst:.3f}"


def test_round_phases_times_a_client_trained_one_at_a_time_as_training(capsys):
    from simulation.benchmarks import round_phases

    assert round_phases.main([*TINY, "--batch", "8", "--one-at-a-time"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rounds = [line for line in lines if line.startswith("round ")]
    assert all(" train " in line and " train_stacked " not in line for line in rounds)
    training = float(rounds[1].split(" train ")[1].split()[0])
    assert lines[-2].startswith(f"training_s {training:.3f}  round_s ") and lines[-1].startswith("steady_s ")


BOUND_TINY = ["--model", "cnn", "--device", "cpu", "--clients", "3", "--batch", "4", "--repeats", "1", "--steps", "2"]


def test_batching_bound_times_every_variant_against_the_stacked_step(capsys):
    """On a CPU the variants run eagerly when named (torch.compile with its eager backend: dynamo traces the step);
    each prints ms per step and its ratio to the stacked step, between the gradients and the ratios."""
    from simulation.benchmarks import batching_bound

    argv = [*BOUND_TINY, "--variants", "compile,channels-last,streams", "--compile-backend", "eager"]
    assert batching_bound.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[4].startswith("stacked step (3 clients, SGD move): ") and "run eagerly" in lines[4]
    base = float(lines[4].split(": ")[1].split(" ms/step")[0])
    for line, name in zip(lines[5:8], ("compile", "channels-last", "streams"), strict=True):
        assert line.startswith(f"variant {name}"), line
        ms = float(line.split("): " if name != "streams" else "streams: ")[1].split(" ms/step")[0])
        ratio = float(line.rsplit(", ", 1)[1].removesuffix("× the stacked step)"))
        assert math.isfinite(ms) and ratio == pytest.approx(ms / base, rel=0.02, abs=0.002)
    assert lines[-1].startswith("batching_bound ")


def test_a_variant_that_fails_says_why_in_one_line_and_the_run_goes_on(capsys):
    from simulation.benchmarks import batching_bound

    assert batching_bound.main([*BOUND_TINY, "--variants", "compile", "--compile-backend", "no-such-backend"]) == 0
    lines = capsys.readouterr().out.splitlines()
    failed = next(line for line in lines if line.startswith("variant compile"))
    assert ": could not run: " in failed and "no-such-backend" in failed
    assert lines[-1].startswith("batching_bound ")


def test_batching_bound_skips_the_variants_on_a_cpu_unless_named_and_refuses_unknown_ones(capsys):
    from simulation.benchmarks import batching_bound

    assert batching_bound.main(BOUND_TINY) == 0
    assert any(line.startswith("variants: skipped on a CPU") for line in capsys.readouterr().out.splitlines())
    with pytest.raises(SystemExit) as stop:
        batching_bound.main([*BOUND_TINY, "--variants", "compile,graphs"])
    assert stop.value.code == 2 and "--variants" in capsys.readouterr().err


def test_a_variant_slower_than_the_patience_is_timed_by_its_first_round_and_printed_at_once(monkeypatch, capsys):
    """A variant whose untimed first round passes PATIENCE_S gives that round's seconds and says so; each line is
    out before the next variant starts (a slow variant never hides the lines of those before it)."""
    from simulation.benchmarks import batching_bound, step_variants

    monkeypatch.setattr(step_variants, "PATIENCE_S", 0.0)
    printed_before_streams = []
    real = step_variants.per_client_streams

    def streams_after_a_look(*args):
        printed_before_streams.append(capsys.readouterr().out)
        return real(*args)

    monkeypatch.setattr(step_variants, "per_client_streams", streams_after_a_look)
    assert batching_bound.main([*BOUND_TINY, "--variants", "channels-last,streams"]) == 0
    before = printed_before_streams[0].splitlines()
    assert before[-1].startswith("variant channels-last") and before[-2].startswith("stacked step")
    lines = [*before, *capsys.readouterr().out.splitlines()]
    for name in ("stacked step", "variant channels-last", "variant streams"):
        line = next(line for line in lines if line.startswith(name))
        assert "its first round took" in line and "so it was not timed again" in line, line


def test_private_step_times_each_part_of_a_dp_sgd_step_against_the_plain_gradient(capsys):
    """Every part of one private stacked step gets a line with its ratio to the plain stacked gradient; the pieces
    a step takes follow the memory cap (one piece when every record is allowed)."""
    from simulation.benchmarks import private_step

    assert private_step.main(["--model", "cnn", "--device", "cpu", "--clients", "2", "--batch", "4",
                              "--repeats", "1"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    plain = float(lines[1].split(": ")[1].split(" ms")[0])
    assert lines[1].startswith("plain stacked gradient: ") and "(1.00× plain)" in lines[1]
    for line in lines[2:8]:
        ms = float(line.rsplit(": ", 1)[1].split(" ms")[0])
        ratio = float(line.rsplit(" ms (", 1)[1].split("× plain")[0])
        assert ms > 0 and ratio == pytest.approx(ms / plain, rel=0.02, abs=0.01), line
    assert "1 piece(s) a step" in lines[3] and lines[7].startswith("private gradient by ghost clipping")
    assert lines[-2].startswith("private_over_plain ") and lines[-1].startswith("ghost_over_plain ")


def test_private_step_pieces_follow_the_record_gradient_cap():
    from fedsuite.batched import private as stacked_private
    from simulation.benchmarks import private_step
    from simulation.benchmarks.step_bounds import Workload

    work = Workload("cnn", 2, 4, 1, private_step.torch.device("cpu"))
    model = stacked_private.StackedModel(private_step.step_bounds.flat_model(work), 2)
    per_record = 2 * model.x.shape[1] * 4  # one record of each client, float32
    oracle = private_step.private_oracle(model, 4, 3 * per_record)
    assert oracle.records_per_piece() == 3 and private_step.private_oracle(model, 4, 10**18).records_per_piece() == 4
