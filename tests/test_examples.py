"""The examples that docs/own/model.md and docs/own/data.md point to (examples/own_model,
examples/own_data) run as their READMEs say, shortened to a round or two in process."""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite.models.networks import seeded_model, trainable
from fedsuite.run.inprocess import run_inprocess

MODELS = "examples.own_model.models"
SMALL = {"num-server-rounds": 1, "num-clients": 4, "clients-per-round": 2, "local-steps": 2, "batch-size": 8,
         "dataset": "fashion-mnist", "partition": "iid"}  # fmt: skip


def test_the_user_written_small_cnn_is_the_builtin_cnn():
    """Same layers in the same order: the same seeded initial model, hence the benchmark's like-for-like pair."""
    mine = seeded_model(f"{MODELS}:small_cnn", (1, 28, 28), 10, "classification", 3)
    built_in = seeded_model("cnn", (1, 28, 28), 10, "classification", 3)
    pairs = list(zip(trainable(mine), trainable(built_in), strict=True))
    assert all(a.shape == b.shape and bool((a == b).all()) for a, b in pairs)


@pytest.mark.parametrize(
    "extra",
    [
        {"model": f"{MODELS}:bn_cnn", "model-args": "{width=8}"},
        {"model": f"{MODELS}:bn_cnn", "buffers": "local", "algorithm": "scaffold"},
        {"model": f"{MODELS}:frozen_features", "model-args": "{hidden=32}"},
    ],
    ids=["bn-average", "bn-local-scaffold", "frozen-head"],
)
def test_own_model_examples_train(extra):
    strategy = run_inprocess({**SMALL, **extra})
    assert np.isfinite(strategy.x).all() and not np.array_equal(strategy.x, strategy.plan.initial_x)


def test_frozen_features_federates_the_head_only():
    strategy = run_inprocess({**SMALL, "model": f"{MODELS}:frozen_features", "model-args": "{hidden=32}"})
    assert strategy.dim == 32 * 10 + 10


def test_own_data_loader_example_with_natural_partitions():
    cfg = {"dataset": "examples.own_data.loaders:blobs", "model": "2nn", "partition": "natural",
           "partition-column": "region", "clients-per-round": 5, "num-server-rounds": 2, "local-steps": 2}  # fmt: skip
    strategy = run_inprocess({**cfg, "num-clients": 5})
    assert strategy.plan.sampler.num_clients == 5 and np.isfinite(strategy.x).all()
