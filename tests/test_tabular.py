"""HAR and ESR (fedsuite/data/har.py, esr.py, tabular.py) from small fixtures in the published file formats,
through the loaders and the partition/node path a run uses; the 2NN on MNIST-family and tabular inputs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import client_partition, esr, load_dataset
from fedsuite.data.datasets import DatasetCorrupt, DatasetNotFound
from fedsuite.data.har import load_har
from fedsuite.evaluation.metrics import Evaluator
from fedsuite.models.networks import build_model
from fedsuite.node.holdings import ClientNode
from fedsuite.run.inprocess import run_inprocess


def count(net: torch.nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


# --- fixtures in the published formats -----------------------------------------------------------------------


def har_number(v: float) -> str:
    """UCI HAR's X files: '%15.7e' with a three-digit exponent, e.g. '  2.8858451e-001'."""
    return re.sub(r"e([+-])(\d\d)$", r"e\g<1>0\g<2>", f"{v:15.7e}")


def write_har(
    root: Path, n_train=12, n_test=6, seed=0, nested=True, signal=0.0
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    base = root / "UCI HAR Dataset" if nested else root
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.uniform(-1, 1, (n, 561)) * rng.uniform(0.1, 3.0, 561)
        y = np.arange(n) % 6 + 1  # file labels 1..6, every class present
        if signal:  # learnable: a class offset on features 0..5 over small noise, the rest constant (std kept 1)
            x[:, :12] = rng.normal(0.0, 0.3, (n, 12))
            x[:, :6] += signal * np.eye(6)[y - 1]
            x[:, 12:] = 0.5
        (base / split).mkdir(parents=True, exist_ok=True)
        (base / split / f"X_{split}.txt").write_text("".join(" ".join(har_number(v) for v in row) + "\n" for row in x))
        (base / split / f"y_{split}.txt").write_text("".join(f"{int(v)}\n" for v in y))
        (base / split / f"subject_{split}.txt").write_text("".join(f"{1 + i % 3}\n" for i in range(n)))
        out[split] = (np.array([[float(har_number(v)) for v in row] for row in x]), y)
    return out


def write_esr(root: Path, per_class=5, seed=0, name="Epileptic Seizure Recognition.csv", quoted=False):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(1, 6), per_class)
    rng.shuffle(y)
    x = rng.integers(-1500, 1500, (len(y), 178))
    cols = [f"X{i}" for i in range(1, 179)] + ["y"]
    header = ",".join(f'"{c}"' for c in ["", *cols]) if quoted else "," + ",".join(cols)
    rows = [f"X{rng.integers(1, 24)}.V1.{i}," + ",".join(str(v) for v in x[i]) + f",{y[i]}" for i in range(len(y))]
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(header + "\n" + "\n".join(rows) + "\n")
    return x.astype(np.float64), y


# --- HAR ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nested", [True, False])
def test_har_reads_the_published_layout_and_standardises_with_train_statistics(tmp_path, nested):
    raw = write_har(tmp_path, nested=nested)
    ds = load_har(str(tmp_path))
    assert ds.input_shape == (561,) and ds.num_classes == 6 and ds.task == "classification"
    assert len(ds.train) == 12 and len(ds.test) == 6
    assert ds.train.y.tolist() == (raw["train"][1] - 1).tolist()  # 1..6 → 0..5
    xs, xt = raw["train"][0], raw["test"][0]
    mean, std = xs.mean(0), xs.std(0)
    np.testing.assert_allclose(ds.train.x.numpy(), (xs - mean) / std, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ds.test.x.numpy(), (xt - mean) / std, rtol=1e-5, atol=1e-5)  # train stats on test
    assert ds.train.x.dtype == torch.float32


def test_har_missing_file_names_the_path_and_the_layout(tmp_path):
    write_har(tmp_path)
    (tmp_path / "UCI HAR Dataset" / "test" / "y_test.txt").unlink()
    with pytest.raises(DatasetNotFound) as err:
        load_har(str(tmp_path))
    msg = str(err.value)
    assert str(tmp_path / "UCI HAR Dataset" / "test" / "y_test.txt") in msg
    assert "UCI HAR Dataset/{train,test}/{X,y}_{train,test}.txt" in msg
    with pytest.raises(DatasetNotFound, match="no downloader"):
        load_har(str(tmp_path), download=True)


def _damage_har(base: Path, damage: str) -> Path:
    x_path, y_path = base / "train" / "X_train.txt", base / "train" / "y_train.txt"
    if damage == "truncated-line":
        text = x_path.read_text()
        x_path.write_text(text[: len(text) - 200])  # the last sample loses its last values
        return x_path
    if damage == "garbled":
        x_path.write_text(x_path.read_text().replace("e-001", "e-0x1", 3))
        return x_path
    if damage == "560-features":
        x_path.write_text("".join(line.rsplit(" ", 1)[0] + "\n" for line in x_path.read_text().splitlines()))
        return x_path
    if damage == "label-7":
        y_path.write_text(y_path.read_text().replace("6\n", "7\n", 1))
        return y_path
    if damage == "labels-short":
        y_path.write_text("".join(y_path.read_text().splitlines(keepends=True)[:-1]))
        return y_path
    y_path.write_bytes(b"")  # empty
    return y_path


@pytest.mark.parametrize("damage", ["truncated-line", "garbled", "560-features", "label-7", "labels-short", "empty"])
def test_har_damaged_files_are_dataset_corrupt(tmp_path, damage):
    write_har(tmp_path)
    path = _damage_har(tmp_path / "UCI HAR Dataset", damage)
    with pytest.raises(DatasetCorrupt, match=re.escape(str(path))):
        load_har(str(tmp_path))


def _har_cfg(tmp_path: Path, **extra):
    base = {"dataset": "har", "data-dir": str(tmp_path), "num-clients": 3, "clients-per-round": 2}
    return resolve({**base, **extra})


def test_har_through_the_partition_and_node_path_with_the_2nn(tmp_path):
    write_har(tmp_path, n_train=30, n_test=12)
    cfg = _har_cfg(tmp_path, partition="shards")
    assert cfg.model == "2nn"  # the LoSAC default for tabular data
    ds = load_dataset(cfg)
    parts = client_partition(cfg, ds)
    assert [len(p) for p in parts] == [10, 10, 10]
    node = ClientNode(cfg, 1, 3)
    assert node.data.inputs.shape == (10, 561) and node.data.inputs.dtype == torch.float32
    assert node.data.targets.tolist() == ds.train.y[parts[1]].tolist()
    assert node.model.dim == 561 * 200 + 200 + 200 * 200 + 200 + 200 * 6 + 6
    assert node.model.module(node.data.inputs).shape == (10, 6)
    metrics = Evaluator(ds, cfg.model, torch.device("cpu"))(np.zeros(node.model.dim, np.float32))
    assert metrics["loss"] == pytest.approx(np.log(6.0))


def test_har_binary_labels_split_at_file_label_3(tmp_path):
    raw = write_har(tmp_path, n_train=18, n_test=12)
    ds = load_dataset(_har_cfg(tmp_path, **{"label-transform": "binary", "model": "logreg"}))
    assert ds.num_classes == 2
    assert ds.train.y.tolist() == (raw["train"][1] > 3).astype(int).tolist()
    assert np.bincount(ds.test.y.numpy()).tolist() == [6, 6]
    node = ClientNode(_har_cfg(tmp_path, **{"label-transform": "binary", "model": "logreg"}), 0, 3)
    assert node.model.dim == 561 * 2 + 2


def test_har_federated_run_in_process_learns(tmp_path):
    write_har(tmp_path, n_train=60, n_test=30, signal=2.0)
    cfg = {
        **_har_cfg(tmp_path),
        "algorithm": "scaffold",  # LoSAC's reference method (Table II)
        "partition": "iid",
        "num-server-rounds": 4,
        "local-steps": 10,
        "batch-size": 10,
        "lr": 0.1,
    }
    x = run_inprocess(cfg).x
    evaluate = Evaluator(load_dataset(resolve(cfg)), "2nn", torch.device("cpu"))
    x0 = ClientNode(resolve(cfg), 0, 3).initial_x().numpy()
    assert evaluate(x0)["accuracy"] < 0.5 and evaluate(x)["accuracy"] >= 0.8


# --- ESR ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, quoted", [("Epileptic Seizure Recognition.csv", False), ("data.csv", True)])
def test_esr_reads_the_csv_as_seizure_vs_rest_with_a_fixed_stratified_split(tmp_path, name, quoted):
    x, y = write_esr(tmp_path, per_class=5, name=name, quoted=quoted)
    ds = esr.load_esr(str(tmp_path))
    assert ds.input_shape == (178,) and ds.num_classes == 2
    assert len(ds.train) == 20 and len(ds.test) == 5  # one of five rows per class to test
    train, test = esr.stratified_split(y)
    assert sorted(y[test].tolist()) == [1, 2, 3, 4, 5]
    assert ds.train.y.tolist() == (y[train] == 1).astype(int).tolist()  # seizure (y = 1) → 1
    assert ds.test.y.tolist() == (y[test] == 1).astype(int).tolist()
    mean, std = x[train].mean(0), x[train].std(0)
    np.testing.assert_allclose(ds.test.x.numpy(), (x[test] - mean) / std, rtol=1e-5, atol=1e-5)


def test_esr_split_has_the_papers_sizes_and_ignores_the_run_seed(tmp_path):
    y = np.repeat(np.arange(1, 6), 2300)
    np.random.default_rng(1).shuffle(y)
    train, test = esr.stratified_split(y)
    assert (len(train), len(test)) == (9200, 2300)  # the LoSAC paper's split
    assert np.bincount(y[test]).tolist() == [0, 460, 460, 460, 460, 460]
    assert np.intersect1d(train, test).size == 0 and len(np.union1d(train, test)) == len(y)
    assert np.array_equal(esr.stratified_split(y)[1], test)  # fixed seed: the same rows every time
    write_esr(tmp_path, per_class=10)
    tests = [load_dataset(resolve({"dataset": "esr", "data-dir": str(tmp_path), "seed": s})).test for s in (0, 7)]
    assert torch.equal(tests[0].x, tests[1].x) and torch.equal(tests[0].y, tests[1].y)


def test_esr_binary_transform_keeps_the_labels(tmp_path):
    write_esr(tmp_path, per_class=10)
    cfg = {"dataset": "esr", "data-dir": str(tmp_path), "num-clients": 4, "clients-per-round": 2}
    plain, binary = (load_dataset(resolve({**cfg, "label-transform": t})) for t in ("none", "binary"))
    assert plain.num_classes == binary.num_classes == 2
    assert torch.equal(plain.train.y, binary.train.y) and np.bincount(plain.train.y.numpy()).tolist() == [32, 8]
    node = ClientNode(resolve(cfg), 3, 4)
    assert node.data.inputs.shape == (10, 178)
    assert node.model.module(node.data.inputs).shape == (10, 2)


def test_esr_missing_file_names_both_names_and_the_folder(tmp_path):
    with pytest.raises(DatasetNotFound) as err:
        esr.load_esr(str(tmp_path / "nowhere"))
    msg = str(err.value)
    assert "Epileptic Seizure Recognition.csv" in msg and "data.csv" in msg and str(tmp_path / "nowhere") in msg


@pytest.mark.parametrize("damage", ["truncated", "header", "label-6", "text-value", "empty"])
def test_esr_damaged_csv_is_dataset_corrupt(tmp_path, damage):
    write_esr(tmp_path)
    path = tmp_path / "Epileptic Seizure Recognition.csv"
    text = path.read_text()
    lines = text.splitlines()
    if damage == "truncated":
        path.write_text(text[: len(text) - 300])
    elif damage == "header":
        path.write_text("\n".join([lines[0].replace("X178", "X179")] + lines[1:]))
    elif damage == "label-6":
        path.write_text("\n".join(lines[:-1] + [lines[-1].rsplit(",", 1)[0] + ",6"]))
    elif damage == "text-value":
        path.write_text("\n".join(lines[:2] + [lines[2].replace(",", ",abc", 2).replace(",abc", ",", 1)] + lines[3:]))
    else:
        path.write_text("")
    with pytest.raises(DatasetCorrupt, match=re.escape(str(path))) as err:
        esr.load_esr(str(tmp_path))
    assert str(err.value).count("cannot be decoded") == 1
    if damage in ("header", "empty"):
        assert "header must be ',X1,...,X178,y'" in str(err.value)


# --- the 2NN and the dataset/model table -------------------------------------------------------------------


def test_two_nn_parameter_count_is_mcmahans():
    assert count(build_model("2nn", (1, 28, 28), 10, "classification")) == 199_210  # 784-200-200-10


@pytest.mark.parametrize(
    "dataset, shape, classes", [("mnist", (1, 28, 28), 10), ("fashion-mnist", (1, 28, 28), 10), ("har", (561,), 6)]
)
def test_two_nn_fits_the_mnist_family_and_tabular_data(dataset, shape, classes):
    assert resolve({"dataset": dataset, "model": "2nn"}).model == "2nn"
    net = build_model("2nn", shape, classes, "classification")
    assert net(torch.zeros(3, *shape)).shape == (3, classes)
    assert count(net) == int(np.prod(shape)) * 200 + 200 + 200 * 200 + 200 + 200 * classes + classes


@pytest.mark.parametrize("dataset", ["har", "esr"])
def test_tabular_models(dataset):
    assert resolve({"dataset": dataset}).model == "2nn"
    assert resolve({"dataset": dataset, "model": "logreg"}).model == "logreg"
    for unfit in ("cnn", "resnet18-gn"):
        with pytest.raises(ConfigError, match=f"model='{unfit}' does not fit dataset='{dataset}'"):
            resolve({"dataset": dataset, "model": unfit})
