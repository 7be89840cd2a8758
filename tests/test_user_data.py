"""Your own data (docs/own/data.md): loaders named by import path, image folders, tables, natural partitions,
and the one-line errors before training."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import DataError, LoadedData, client_partition, load_dataset, with_data_clients
from fedsuite.data.datasets import DatasetCorrupt
from fedsuite.run.inprocess import run_inprocess

HERE = "tests.test_user_data"


# ---- loaders the run configs name ---------------------------------------------------------------------------------
def regression(seed: int) -> LoadedData:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(30, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0])
    return LoadedData(train=(x[:20], y[:20]), test=(x[20:], y[20:]), task="regression")


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return torch.full((2,), float(i)), i % 2


def from_torch_datasets() -> LoadedData:
    return LoadedData(train=Pairs(), test=Pairs())


def labels_out_of_range() -> LoadedData:
    return LoadedData(train=(np.zeros((4, 2)), np.array([0, 1, 2, 5])), test=(np.zeros((2, 2)), np.array([0, 1])),
                      num_classes=3)  # fmt: skip


def nan_features() -> LoadedData:
    x = np.zeros((4, 2))
    x[1, 1] = np.nan
    return LoadedData(train=(x, np.array([0, 1, 0, 1])), test=(np.zeros((2, 2)), np.array([0, 1])))


def not_loaded_data():
    return {"train": None}


def failing(data_dir):
    raise OSError(f"no files in {data_dir!r}")


# ---- loaders ------------------------------------------------------------------------------------------------------
def test_a_loader_returns_arrays_or_torch_datasets_and_a_task():
    ds = load_dataset(resolve({"dataset": f"{HERE}:regression", "seed": 3}))
    assert ds.task == "regression" and ds.input_shape == (4,) and len(ds.train) == 20 and ds.num_classes == 1
    pairs = load_dataset(resolve({"dataset": f"{HERE}:from_torch_datasets"}))
    assert pairs.num_classes == 2 and pairs.train.x.shape == (6, 2) and pairs.train.y.tolist() == [0, 1] * 3


def test_a_regression_loader_trains_a_linear_model():
    strategy = run_inprocess({"dataset": f"{HERE}:regression", "model": "linear", "num-clients": 2,
                              "clients-per-round": 2, "num-server-rounds": 2, "partition": "iid", "device": "cpu",
                              "batch-size": 0, "lr": 0.1})  # fmt: skip
    assert strategy.dim == 4


@pytest.mark.parametrize(
    "loader, message",
    [
        ("nowhere.at_all:load", "cannot import"),
        (f"{HERE}:labels_out_of_range", "outside [0, 3)"),
        (f"{HERE}:nan_features", "NaN or inf"),
        (f"{HERE}:not_loaded_data", "not a fedsuite.data.own.LoadedData"),
        (f"{HERE}:failing", "no files in"),
    ],
)
def test_bad_loaders_fail_in_one_line_naming_the_key(loader, message):
    with pytest.raises(DataError) as err:
        load_dataset(resolve({"dataset": loader}))
    assert message in str(err.value) and f"dataset={loader!r}" in str(err.value) and "\n" not in str(err.value)


# ---- image folders ------------------------------------------------------------------------------------------------
def write_images(root, per_class: dict[str, int], size=(12, 10)):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in per_class.items():
        for label in ("cat", "dog"):
            (root / split / label).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i}.png")


def test_imagefolder_is_decoded_once_resized_and_trains(tmp_path):
    write_images(tmp_path, {"train": 4, "test": 2})
    cfg = {"dataset": "imagefolder", "data-dir": str(tmp_path), "image-size": 8}
    ds = load_dataset(resolve(cfg))
    assert ds.input_shape == (3, 8, 8) and ds.num_classes == 2 and len(ds.train) == 8 and len(ds.test) == 4
    assert ds.train.y.tolist() == [0] * 4 + [1] * 4  # classes: sorted folder names
    assert len(list(tmp_path.glob("fedsuite-imagefolder-8-*.npz"))) == 1  # the decoded cache
    strategy = run_inprocess({**cfg, "num-clients": 2, "clients-per-round": 2, "num-server-rounds": 1,
                              "partition": "iid", "device": "cpu", "batch-size": 2})  # fmt: skip
    assert strategy.plan.evaluate is not None and strategy.dim > 0


def test_a_test_folder_without_some_training_classes_is_a_warning(tmp_path, caplog):
    write_images(tmp_path, {"train": 2, "test": 1})
    shutil.rmtree(tmp_path / "test" / "dog")
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        ds = load_dataset(resolve({"dataset": "imagefolder", "data-dir": str(tmp_path), "image-size": 8}))
    (warning,) = [r.getMessage() for r in caplog.records if "imagefolder" in r.getMessage()]
    assert "1 class(es) of train/ (dog)" in warning and "\n" not in warning
    assert ds.num_classes == 2 and ds.test.y.tolist() == [0]


def test_an_unreadable_image_is_named(tmp_path):
    write_images(tmp_path, {"train": 2, "test": 1})
    (tmp_path / "train" / "dog" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DatasetCorrupt, match="broken.png"):
        load_dataset(resolve({"dataset": "imagefolder", "data-dir": str(tmp_path), "image-size": 9}))


# ---- tables and natural partitions --------------------------------------------------------------------------------
def write_table(root, train_rows=12, **extra):
    import pandas as pd

    rng = np.random.default_rng(1)
    for split, n in (("train", train_rows), ("test", 6)):
        frame = pd.DataFrame({"a": rng.normal(5.0, 2.0, n), "b": rng.normal(size=n), "y": rng.integers(0, 3, n)})
        frame["site"] = (["north"] * 6 + ["south"] * 4 + ["east"] * 2)[:n] if split == "train" else "x"
        for column, values in extra.items():
            frame[column] = values[:n]
        frame.to_csv(root / f"{split}.csv", index=False)


def table(tmp_path, **keys):
    return {"dataset": "table", "data-dir": str(tmp_path), "label-column": "y", **keys}


def test_table_features_are_standardised_with_training_statistics(tmp_path):
    write_table(tmp_path)
    ds = load_dataset(resolve(table(tmp_path, **{"partition-column": "site"})))
    assert ds.input_shape == (2,) and ds.num_classes == 3  # a, b; y is the label, site says whose row it is
    np.testing.assert_allclose(ds.train.x.mean(0).numpy(), 0.0, atol=1e-6)
    np.testing.assert_allclose(ds.train.x.std(0, unbiased=False).numpy(), 1.0, atol=1e-5)


def test_natural_partitions_make_one_client_per_value(tmp_path):
    write_table(tmp_path)
    keys = table(tmp_path, partition="natural", **{"partition-column": "site", "clients-per-round": 3})
    cfg = with_data_clients(resolve(keys))
    assert cfg.num_clients == 3
    parts = client_partition(cfg, load_dataset(cfg))
    assert [p.tolist() for p in parts] == [[10, 11], list(range(6)), [6, 7, 8, 9]]  # east, north, south
    strategy = run_inprocess({**keys, "num-server-rounds": 1, "device": "cpu", "batch-size": 2})
    assert strategy.plan.sampler.num_clients == 3
    with pytest.raises(ConfigError, match="num-clients=5: partition='natural'.* makes 3 clients"):
        with_data_clients(resolve({**keys, "num-clients": 5}))


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"label-column": "label"}, "label-column='label'"),
        ({"partition": "natural", "partition-column": "town"}, "partition-column='town'"),
    ],
)
def test_table_columns_that_are_not_there_are_named(tmp_path, keys, message):
    write_table(tmp_path)
    with pytest.raises((DataError, ConfigError), match=message):
        cfg = resolve(table(tmp_path, **keys))
        with_data_clients(cfg) if cfg.partitioning.scheme == "natural" else load_dataset(cfg)


def test_non_numeric_features_are_refused(tmp_path):
    write_table(tmp_path, colour=["red", "blue"] * 6)
    with pytest.raises(DataError, match=r"train.csv: column\(s\) \['colour'\] are not numeric"):
        load_dataset(resolve(table(tmp_path, **{"partition-column": "site"})))


def test_natural_partition_needs_its_column():
    with pytest.raises(ConfigError, match="partition='natural': give partition-column"):
        resolve({"partition": "natural"})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (f"dataset='{HERE}:nan_features'", "features hold NaN or inf values"),
        (f"dataset='{HERE}:labels_out_of_range'", "outside [0, 3)"),
        ("dataset='table' data-dir='{tmp}' label-column='label'", "label-column='label'"),
        ("dataset='table' data-dir='{tmp}' label-column='y' partition='natural' partition-column='site' "
         "num-clients=12 clients-per-round=2", "num-clients=12: partition='natural'"),
    ],
)  # fmt: skip
def test_simulation_run_check_exits_2_with_one_line(tmp_path, capsys, overrides, message):
    from simulation.run import main

    write_table(tmp_path)
    out = tmp_path / "results"
    code = main(["--check", "-c", overrides.format(tmp=tmp_path) + f" out-dir='{out}'"])
    err = capsys.readouterr().err
    assert code == 2 and message in err


def test_hf_reads_save_to_disk_folders_and_local_files(tmp_path):
    import datasets

    rng = np.random.default_rng(2)
    splits = {
        split: datasets.Dataset.from_dict({"pixels": rng.normal(size=(n, 2, 3)).astype(np.float32).tolist(),
                                           "label": rng.integers(0, 4, n).tolist(), "user": [i % 2 for i in range(n)]})
        for split, n in (("train", 8), ("test", 4))
    }  # fmt: skip
    splits = {k: v.cast_column("label", datasets.ClassLabel(num_classes=4)) for k, v in splits.items()}
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "saved"))
    cfg = {"dataset": "hf", "data-dir": str(tmp_path / "saved"), "feature-column": "pixels", "partition": "natural",
           "partition-column": "user", "clients-per-round": 2}  # fmt: skip
    ds = load_dataset(resolve(cfg))
    assert ds.input_shape == (2, 3) and len(ds.train) == 8 and ds.num_classes == 4
    assert with_data_clients(resolve(cfg)).num_clients == 2
    for split, frame in splits.items():
        frame.remove_columns("pixels").add_column("f", [1.0, 2.0, 4.0, 8.0] * (len(frame) // 4)).to_parquet(
            str(tmp_path / f"{split}.parquet")
        )
    flat = load_dataset(resolve({"dataset": "hf", "data-dir": str(tmp_path), "partition-column": "user"}))
    assert flat.input_shape == (1,) and abs(float(flat.train.x.mean())) < 1e-6  # standardised as for tables
