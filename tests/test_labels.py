"""label-transform (docs/reference/protocol.md, Label transforms): the binary relabelling per dataset, its config check,
model sizing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.config.schema import BINARY_LABEL_DATASETS, DATASETS
from fedsuite.data import client_partition, load_dataset
from fedsuite.data.labels import BINARY_THRESHOLDS, binary_labels
from fedsuite.evaluation.metrics import Evaluator
from fedsuite.node.holdings import ClientNode
from tests.test_datasets import fake_mnist

FMNIST = Path("/usr/share/datasets/fashion-mnist")


def test_thresholds_cover_exactly_the_datasets_config_allows():
    assert set(BINARY_THRESHOLDS) == set(BINARY_LABEL_DATASETS)
    assert set(BINARY_LABEL_DATASETS) <= set(DATASETS)


@pytest.mark.parametrize(
    "name, labels, expected",
    [
        ("mnist", range(10), [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]),  # ≤ 5 → 0
        ("fashion-mnist", range(10), [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]),  # ≤ 4 → 0
        ("har", range(6), [0, 0, 0, 1, 1, 1]),  # file labels 1..6 (loaded 0..5): ≤ 3 → 0
        ("esr", [1, 0, 0, 1], [1, 0, 0, 1]),  # loaded binary already (seizure = 1)
    ],
)
def test_binary_rule_per_dataset(name, labels, expected):
    y = torch.tensor(list(labels), dtype=torch.int64)
    out = binary_labels(name, y)
    assert out.dtype == torch.int64 and out.tolist() == expected
    assert y.tolist() == list(labels)  # the decoded labels are not modified in place


def test_binary_rule_refuses_other_datasets():
    with pytest.raises(ValueError, match=r"dataset='cifar10'.*mnist, fashion-mnist, har, esr"):
        binary_labels("cifar10", torch.zeros(3, dtype=torch.int64))


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100", "tinyimagenet", "synthetic-lsq", "synthetic-logistic"])
def test_config_refuses_binary_where_it_is_not_defined(dataset):
    with pytest.raises(ConfigError) as err:
        resolve({"dataset": dataset, "label-transform": "binary"})
    msg = str(err.value)
    assert "label-transform='binary'" in msg and f"dataset={dataset!r}" in msg
    for name in BINARY_LABEL_DATASETS:
        assert name in msg


def test_config_key_default_and_choices():
    assert resolve()["label-transform"] == "none"
    with pytest.raises(ConfigError, match="label-transform='parity'.*none, binary"):
        resolve({"label-transform": "parity"})
    for name in BINARY_LABEL_DATASETS:
        assert resolve({"dataset": name, "label-transform": "binary"})["label-transform"] == "binary"


def _mnist_cfg(tmp_path: Path, transform: str, **extra):
    return resolve({"dataset": "mnist", "data-dir": str(tmp_path), "label-transform": transform, **extra})


def test_binary_mnist_counts_through_the_run_path(tmp_path):
    arrays = fake_mnist(tmp_path, n_train=40, n_test=20, seed=3)
    train_labels = arrays["train-labels-idx1-ubyte"].astype(np.int64)
    test_labels = arrays["t10k-labels-idx1-ubyte"].astype(np.int64)
    plain = load_dataset(_mnist_cfg(tmp_path, "none"))
    binary = load_dataset(_mnist_cfg(tmp_path, "binary"))
    assert plain.num_classes == 10 and binary.num_classes == 2
    assert plain.train.y.tolist() == train_labels.tolist()  # 'none' keeps the classes
    want_train = np.bincount((train_labels > 5).astype(np.int64), minlength=2)
    want_test = np.bincount((test_labels > 5).astype(np.int64), minlength=2)
    assert np.bincount(binary.train.y.numpy(), minlength=2).tolist() == want_train.tolist()
    assert np.bincount(binary.test.y.numpy(), minlength=2).tolist() == want_test.tolist()
    assert binary.train.x is plain.train.x  # pixels are shared, only labels are copied


def test_binary_model_has_two_outputs_on_clients_and_server(tmp_path):
    fake_mnist(tmp_path, n_train=40, n_test=20, seed=4)
    cfg = _mnist_cfg(tmp_path, "binary", model="logreg", **{"num-clients": 4, "clients-per-round": 2})
    node = ClientNode(cfg, 1, 4)
    assert node.model.dim == 784 * 2 + 2
    assert node.model.module(node.data.inputs[:3]).shape == (3, 2)
    assert set(node.data.targets.tolist()) <= {0, 1}
    evaluator = Evaluator(node.dataset, cfg.model, torch.device("cpu"))
    metrics = evaluator(np.zeros(node.model.dim, np.float32))
    assert metrics["loss"] == pytest.approx(np.log(2.0))  # zero model: uniform over 2 classes


def test_partitions_follow_the_transformed_labels(tmp_path):
    fake_mnist(tmp_path, n_train=40, n_test=10, seed=5)
    for transform, classes in (("none", 10), ("binary", 2)):
        cfg = _mnist_cfg(tmp_path, transform, partition="shards", **{"num-clients": 4, "clients-per-round": 2})
        ds = load_dataset(cfg)
        parts = client_partition(cfg, ds)
        labels = ds.train.y.numpy()
        # shards are contiguous in the label-sorted order of the labels the run trains on
        for a, b in zip(parts, parts[1:], strict=False):
            assert labels[a].max() <= labels[b].min()
        assert max(labels[p].max() for p in parts) < classes


@pytest.mark.skipif(not FMNIST.is_dir(), reason="Debian dataset-fashion-mnist not installed")
def test_real_fashion_mnist_binary_is_half_and_half():
    ds = load_dataset(resolve({"dataset": "fashion-mnist", "label-transform": "binary"}))
    assert np.bincount(ds.train.y.numpy()).tolist() == [30_000, 30_000]  # 6000 per class, classes 0..4 → 0
    assert np.bincount(ds.test.y.numpy()).tolist() == [5_000, 5_000]


def test_partitions_are_not_shared_between_equal_sized_copies_with_other_labels(tmp_path):
    cfgs = []
    for seed in (6, 7):
        fake_mnist(tmp_path / str(seed), n_train=40, n_test=10, seed=seed)
        extra = {"partition": "shards", "num-clients": 4, "clients-per-round": 2}
        cfgs.append(_mnist_cfg(tmp_path / str(seed), "none", **extra))
    for cfg in cfgs:
        ds = load_dataset(cfg)
        labels = ds.train.y.numpy()
        parts = client_partition(cfg, ds)
        for a, b in zip(parts, parts[1:], strict=False):
            assert labels[a].max() <= labels[b].min()
