"""The batched step recorded as a CUDA graph (cuda-graphs, fedsuite/batched/graph.py, docs/running/batched.md).

On every machine: which stacked rules are recorded and which run step by step, and why. With a CUDA device (CI has
none; run it where a GPU is lent): every algorithm of the registry, batched with the recording and without it, ends
with the same model, and a convolutional model on CIFAR-shaped data does too.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from fedsuite import testing as kit
from fedsuite.batched import graph, loop
from fedsuite.batched.stacking import stack_rules
from fedsuite.local.adaptive import AdamStep, GradientSum
from fedsuite.local.loop import AddVector, SharpnessAware, UpdateRule
from fedsuite.local.variance import BlockTable, FixedBlocks
from fedsuite.registry import known as registry

CUDA = torch.device("cuda")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# What runs step by step (GradientSum counts in Python). LoSAC, LoSAC-Prox and FedSaga are recorded: 12 samples in 4
# blocks of 3, each step's block read from the device (fedsuite/batched/stacking.py's StackedBlockTable).
UNRECORDED = {"fadamgt"}
# Every stage of the loop, 2 rounds (client state written in round 1 is read in round 2), 5 steps: the first runs
# as usual, the second is recorded, every other is a replay, and every step of round 2 (the step is kept).
BASE = {**kit.PARTIAL, "num-clients": 5, "clients-per-round": 4, "synthetic-samples": 12, "batch-size": 4,
        "local-steps": 5, "num-server-rounds": 2, "clip-norm": 0.5, "device": "cuda", "batch-clients": True,
        "model": "tests.test_batched_clients:double_linear", "losac-blocks": 4}  # fmt: skip


def test_which_stacked_rules_are_recorded_and_why_the_others_are_not():
    vector = torch.zeros(3)
    assert graph.not_replayable(UpdateRule(), CUDA, 5) is None
    sam = UpdateRule(point=SharpnessAware(0.1), unclipped=(AddVector(vector),), step=AdamStep(vector, 0.9, 0.99, 1e-8))
    assert graph.not_replayable(sam, CUDA, 5) is None
    assert graph.not_replayable(UpdateRule(), torch.device("cpu"), 5) == "not a CUDA device"
    assert graph.not_replayable(UpdateRule(), CUDA, 2) == "a round of 2 steps"
    counted = UpdateRule(clipped=(GradientSum(0.0),))  # a Python step counter: a replay would not count
    assert "GradientSum" in graph.not_replayable(counted, CUDA, 5)

    class CountingAdd(AddVector):  # a plug-in's subclass of a replayable stage, with state of its own
        def __call__(self, d, ctx):
            super().__call__(d, ctx)

    assert "CountingAdd" in graph.not_replayable(UpdateRule(clipped=(CountingAdd(vector),)), CUDA, 5)
    equal, unequal = FixedBlocks(12, 3, 0, 0), FixedBlocks(10, 3, 0, 0)  # blocks of 4, 4, 4 and of 4, 3, 3
    assert graph.not_replayable(UpdateRule(batches=equal), CUDA, 5) is None  # LoSAC's blocks, read from the device
    assert "fixed blocks differ in size" in graph.not_replayable(UpdateRule(batches=unequal), CUDA, 5)

    class OwnBatches:  # a plug-in's batch source: what it does per step is unknown
        pass

    assert "OwnBatches picks a data block per step" in graph.not_replayable(UpdateRule(batches=OwnBatches()), CUDA, 5)
    tables = [BlockTable([torch.zeros(3), torch.zeros(3)], torch.zeros(3), 1.0) for _ in range(2)]
    stacked = stack_rules([UpdateRule(clipped=(t,), batches=unequal) for t in tables]).rule  # stages only
    assert stacked.batches is None and graph.not_replayable(stacked, CUDA, 5) is None  # the block table replays
    assert "differ in size" in graph.not_replayable(stacked, CUDA, 5, unequal)


def test_a_cpu_run_never_builds_a_recording(monkeypatch):
    built = []
    monkeypatch.setattr(loop, "RecordedStep", lambda *a: built.append(a) or graph.RecordedStep(*a))
    kit.run_algorithm("fedavg", {**BASE, "device": "cpu"})
    assert not built


@pytest.fixture
def recordings(monkeypatch):
    """Every RecordedStep the batched loop builds."""
    made: list[graph.RecordedStep] = []

    def record(*args):
        made.append(graph.RecordedStep(*args))
        return made[-1]

    monkeypatch.setattr(loop, "RecordedStep", record)
    return made


@needs_cuda
@pytest.mark.parametrize("name", tuple(registry.ALGORITHMS))
def test_every_algorithm_recorded_ends_where_step_by_step_ends(name, recordings, caplog):
    stepwise = kit.run_algorithm(name, {**BASE, "cuda-graphs": False})
    assert not recordings
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        recorded = kit.run_algorithm(name, BASE)
    notes = [r.getMessage() for r in caplog.records if "cuda-graphs:" in r.getMessage()]
    assert bool(notes) == (name in UNRECORDED), notes  # a rule run step by step says why, once
    assert all(r.failed is None for r in recordings), [r.failed for r in recordings]
    # one kind of group in both rounds: recorded once for the run, replayed in round 2 (fedsuite/batched/kept_steps.py)
    assert len(recordings) == (0 if name in UNRECORDED else 1), len(recordings)
    gap = float(np.max(np.abs(stepwise.x.astype(np.float64) - recorded.x.astype(np.float64))))
    print(f"{name}: {len(recordings)} recordings, max |Δx| {gap:.3e}")
    assert gap == 0.0  # the same kernels: the same numbers (measured so on an H200)


@needs_cuda
def test_a_convolutional_model_recorded_ends_where_step_by_step_ends(tmp_path, recordings, monkeypatch):
    from simulation.benchmarks.fake_cifar import write_fake_cifar10

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)  # restored after the test
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    data = str(write_fake_cifar10(tmp_path, 4 * 60, 100))
    config = {"dataset": "cifar10", "data-dir": data, "model": "cnn", "num-clients": 4, "clients-per-round": 4,
              "sampling": "fixed", "local-steps": 6, "batch-size": 8, "num-server-rounds": 2, "device": "cuda",
              "batch-clients": True, "clip-norm": 10.0, "weight-decay": 1e-3}  # fmt: skip
    for name in ("fedavg", "fedspeed"):
        recordings.clear()
        stepwise = kit.run_algorithm(name, {**config, "cuda-graphs": False})
        recorded = kit.run_algorithm(name, config)
        assert recordings and all(r.failed is None for r in recordings)
        gap = float(np.max(np.abs(stepwise.x.astype(np.float64) - recorded.x.astype(np.float64))))
        print(f"{name} cnn: max |Δx| {gap:.3e}")
        assert gap == 0.0  # deterministic convolutions, the same kernels (measured so on an H200)
