"""Each client's own test rows under partition='natural' for every kind of own data (table, hf, a loader's
`test_columns`), and own data without a test set (`LoadedData.test=None`, no test file)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import DataError, LoadedData, client_test_rows, load_dataset, server_dataset, with_data_clients
from fedsuite.node.holdings import ClientNode
from fedsuite.run.inprocess import run_inprocess
from tests.observing import Rows

HERE = "tests.test_natural_test_rows"
SITES = ("a", "b", "c")  # clients 0, 1, 2: the sorted distinct values
TRAIN_SIZES = {"a": 20, "b": 30, "c": 25}
TEST_SIZES = {"a": 4, "b": 9, "c": 6}
RUN = {
    "algorithm": "fedavg",
    "model": "logreg",
    "partition": "natural",
    "partition-column": "site",
    "clients-per-round": 3,
    "num-server-rounds": 1,
    "local-steps": 2,
    "batch-size": 8,
    "device": "cpu",
}


def frames(seed: int = 0) -> dict[str, pd.DataFrame]:
    """train and test frames: three features shifted by a binary label, rows of the sites shuffled together."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, sizes in (("train", TRAIN_SIZES), ("test", TEST_SIZES)):
        sites = [site for site in SITES for _ in range(sizes[site])]
        y = rng.integers(0, 2, len(sites))
        x = rng.normal(size=(len(sites), 3)) + y[:, None]
        frame = pd.DataFrame({"f0": x[:, 0], "f1": x[:, 1], "f2": x[:, 2], "site": sites, "label": y})
        out[split] = frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)
    return out


def natural_loader(seed: int) -> LoadedData:
    data = frames(seed)
    train, test = data["train"], data["test"]
    features = ["f0", "f1", "f2"]
    return LoadedData(
        train=(train[features].to_numpy(np.float32), train["label"].to_numpy()),
        test=(test[features].to_numpy(np.float32), test["label"].to_numpy()),
        num_classes=2,
        columns={"site": train["site"].to_numpy()},
        test_columns={"site": test["site"].to_numpy()},
    )


def no_test_loader(seed: int) -> LoadedData:
    train = frames(seed)["train"]
    return LoadedData(train=(train[["f0", "f1", "f2"]].to_numpy(np.float32), train["label"].to_numpy()), test=None,
                      columns={"site": train["site"].to_numpy()})  # fmt: skip


def short_test_columns() -> LoadedData:
    x, y = np.zeros((4, 2)), np.array([0, 1, 0, 1])
    return LoadedData(train=(x, y), test=(x[:2], y[:2]), columns={"site": list("aabb")}, test_columns={"site": ["a"]})


def write_table(folder, kind: str) -> dict:
    """The frames written as `kind` into `folder`; returns the run config keys that read them."""
    folder.mkdir()
    data = frames()
    if kind == "table":
        for split, frame in data.items():
            frame.to_csv(folder / f"{split}.csv", index=False)
        return {"dataset": "table", "data-dir": str(folder), "label-column": "label"}
    if kind in ("hf-parquet", "hf-csv"):
        for split, frame in data.items():
            if kind == "hf-parquet":
                frame.to_parquet(folder / f"{split}.parquet", index=False)
            else:
                frame.to_csv(folder / f"{split}.csv", index=False)
        return {"dataset": "hf", "data-dir": str(folder), "label-column": "label"}
    import datasets

    splits = {
        split: datasets.Dataset.from_dict({"x": frame[["f0", "f1", "f2"]].to_numpy(np.float32).tolist(),
                                           "label": frame["label"].tolist(), "site": frame["site"].tolist()})
        for split, frame in data.items()
    }  # fmt: skip
    splits = {k: v.cast_column("label", datasets.ClassLabel(num_classes=2)) for k, v in splits.items()}
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    return {"dataset": "hf", "data-dir": str(folder), "label-column": "label", "feature-column": "x"}


def data_keys(tmp_path, kind: str) -> dict:
    if kind == "loader":
        return {"dataset": f"{HERE}:natural_loader", "seed": 0}
    return write_table(tmp_path / kind, kind)


@pytest.mark.parametrize("kind", ["table", "hf-saved", "hf-parquet", "hf-csv", "loader"])
def test_each_client_tests_on_exactly_its_sites_test_rows(tmp_path, kind):
    config = {**RUN, **data_keys(tmp_path, kind), "evaluation": "federated"}
    cfg = with_data_clients(resolve(config))
    dataset = load_dataset(cfg)
    test = frames()["test"]  # what was written, in file order
    assert cfg.num_clients == 3 and len(dataset.test) == len(test)
    for pid, site in enumerate(SITES):
        rows = client_test_rows(cfg, dataset, pid, None)
        expected = np.flatnonzero(test["site"].to_numpy() == site)
        assert rows.tolist() == expected.tolist() and len(rows) == TEST_SIZES[site]
        assert dataset.test.y[rows].tolist() == test["label"].to_numpy()[expected].tolist()
        node = ClientNode(cfg, pid, 3)
        assert len(node.test_data) == TEST_SIZES[site] and len(node.data) == TRAIN_SIZES[site]  # none held out
    rows = Rows()
    run_inprocess(config, observers=[rows])
    last = rows.rows[-1]
    assert last["fed_clients"] == 3 and sorted(last["fed_client_accuracy"]) == ["0", "1", "2"]
    assert last["fed_accuracy"] == pytest.approx(  # weighted by each client's own test rows: 4, 9, 6
        sum(last["fed_client_accuracy"][str(pid)] * TEST_SIZES[site] for pid, site in enumerate(SITES))
        / sum(TEST_SIZES.values())
    )


def test_a_site_without_test_rows_holds_out_its_own_share(tmp_path):
    folder = tmp_path / "table"
    folder.mkdir()
    data = frames()
    data["train"].to_csv(folder / "train.csv", index=False)
    data["test"][data["test"]["site"] != "c"].to_csv(folder / "test.csv", index=False)
    cfg = with_data_clients(resolve({**RUN, "dataset": "table", "data-dir": str(folder), "label-column": "label",
                                     "evaluation": "federated"}))  # fmt: skip
    dataset = load_dataset(cfg)
    assert client_test_rows(cfg, dataset, 2, None) is None
    node = ClientNode(cfg, 2, 3)
    held_out = math.floor(cfg.evaluation.local_test_fraction * TRAIN_SIZES["c"])
    assert len(node.test_data) == held_out and len(node.data) == TRAIN_SIZES["c"] - held_out
    assert len(ClientNode(cfg, 1, 3).test_data) == TEST_SIZES["b"]


def test_test_columns_need_one_value_per_test_sample():
    with pytest.raises(DataError, match=r"test_columns\['site'\] has 1 values for 2 test samples") as err:
        load_dataset(resolve({"dataset": f"{HERE}:short_test_columns"}))
    assert "\n" not in str(err.value)


# ---- no test set ----------------------------------------------------------------------------------------------------
NO_TEST = {**RUN, "dataset": f"{HERE}:no_test_loader", "seed": 0}


def test_a_loader_without_a_test_set_refuses_central_evaluation_in_one_line(tmp_path, capsys):
    from simulation.run import main

    dataset = load_dataset(resolve(NO_TEST))
    assert len(dataset.test) == 0 and dataset.test.x.shape[1:] == (3,) and dataset.test_columns == {}
    for mode in ("central", "both"):
        with pytest.raises(ConfigError, match=f"^evaluation={mode!r} tests on the server's test set"):
            server_dataset(resolve({**NO_TEST, "evaluation": mode}))
    overrides = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in NO_TEST.items())
    code = main(["--check", "-c", f"{overrides} out-dir='{tmp_path / 'results'}'"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "evaluation='central'" in err and err.count("\n") == 0


def test_a_loader_without_a_test_set_runs_with_federated_evaluation():
    config = {**NO_TEST, "evaluation": "federated"}
    rows = Rows()
    run_inprocess(config, observers=[rows])
    last = rows.rows[-1]
    assert last["fed_clients"] == 3 and sorted(last["fed_client_accuracy"]) == ["0", "1", "2"]
    assert "accuracy" not in last  # no central test set, no central metric
    cfg = with_data_clients(resolve(config))
    for pid, site in enumerate(SITES):
        held_out = math.floor(cfg.evaluation.local_test_fraction * TRAIN_SIZES[site])
        node = ClientNode(cfg, pid, 3)
        assert len(node.test_data) == held_out and len(node.data) == TRAIN_SIZES[site] - held_out


@pytest.mark.parametrize("kind", ["table", "hf-parquet", "hf-saved"])
def test_table_and_hf_folders_without_a_test_split_have_an_empty_test_set(tmp_path, kind):
    keys = write_table(tmp_path / "data", kind)
    folder = tmp_path / "data"
    if kind == "hf-saved":
        import datasets

        saved = datasets.load_from_disk(str(folder))
        datasets.DatasetDict({"train": saved["train"]}).save_to_disk(str(tmp_path / "train-only"))
        keys = {**keys, "data-dir": str(tmp_path / "train-only")}
    else:
        next(folder.glob("test.*")).unlink()
    cfg = with_data_clients(resolve({**RUN, **keys}))
    dataset = load_dataset(cfg)
    assert len(dataset.train) == sum(TRAIN_SIZES.values()) and len(dataset.test) == 0
    assert dataset.test.x.shape[1:] == dataset.train.x.shape[1:] and dataset.test.y.dtype == dataset.train.y.dtype
    with pytest.raises(ConfigError, match="^evaluation='central'"):
        server_dataset(cfg)
    assert client_test_rows(resolve({**RUN, **keys, "evaluation": "federated"}), dataset, 0, None) is None
