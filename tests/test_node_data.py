"""A deployed node reads its own files (node config `data-dir`) of every kind, table, imagefolder, hf (save_to_disk
folder, parquet, csv) and an import-path loader, and trains on all of them: its data is its partition
(client-mapping='fixed'), whatever the run config's partition scheme."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from fedsuite.node.app import node_for
from fedsuite.run.inprocess import node_contexts, run_inprocess
from tests.observing import Watch

SIZES = (9, 14)  # training rows of node 0 and node 1: different, so a node reading another's files is noticed
RUN = {"num-clients": 2, "clients-per-round": 2, "num-server-rounds": 1, "client-mapping": "fixed", "device": "cpu",
       "batch-size": 4, "local-steps": 2, "partition": "dirichlet", "seed": 3}  # fmt: skip


def node_context(run_config: dict, node_config: dict):
    """The Context a deployed SuperNode with `node_config` gives the ClientApp for a run of `run_config`."""
    return node_contexts(run_config, 1, 0, [node_config])[0]


def rows(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": rng.normal(size=n), "b": rng.normal(size=n), "label": rng.integers(0, 3, n)}


def write_table(folder, n: int, seed: int, suffix: str = "csv") -> np.ndarray:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    train = pd.DataFrame(rows(n, seed))
    train["label"] = np.arange(n) % 3  # every class on every node, so num-classes agrees
    for split, frame in (("train", train), ("test", pd.DataFrame(rows(4, seed + 100)))):
        path = folder / f"{split}.{suffix}"
        frame.to_parquet(path) if suffix == "parquet" else frame.to_csv(path, index=False)
    return train["label"].to_numpy()


def write_saved_hf(folder, n: int, seed: int) -> np.ndarray:
    import datasets

    labels = np.arange(n) % 3
    train = datasets.Dataset.from_dict({**{k: v.tolist() for k, v in rows(n, seed).items()}, "label": labels.tolist()})
    test = datasets.Dataset.from_dict({k: v.tolist() for k, v in rows(4, seed + 100).items()})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(folder))
    return labels


def write_images(folder, n: int, seed: int) -> np.ndarray:
    from PIL import Image

    rng = np.random.default_rng(seed)
    labels = []
    for split, count in (("train", n), ("test", 2)):
        for i in range(count):
            label = ("cat", "dog")[i % 2]
            (folder / split / label).mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).save(folder / split / label / f"{i}.png")
            if split == "train":
                labels.append(i % 2)
    return np.sort(np.array(labels))  # ImageFolder order: class by class


LOADER = """
import numpy as np
from fedsuite.data import LoadedData


def load(data_dir):
    arrays = np.load(f"{data_dir}/arrays.npz")
    return LoadedData((arrays["x"], arrays["y"]), (arrays["x"][:2], arrays["y"][:2]), num_classes=3)
"""


def write_arrays(folder, n: int, seed: int) -> np.ndarray:
    folder.mkdir(parents=True, exist_ok=True)
    labels = np.arange(n) % 3
    np.savez(folder / "arrays.npz", x=np.random.default_rng(seed).normal(size=(n, 2)).astype(np.float32), y=labels)
    return labels


KINDS = {
    "table-csv": ({"dataset": "table"}, write_table),
    "table-parquet": ({"dataset": "table"}, lambda f, n, s: write_table(f, n, s, "parquet")),
    "hf-save-to-disk": ({"dataset": "hf"}, write_saved_hf),
    "hf-parquet": ({"dataset": "hf"}, lambda f, n, s: write_table(f, n, s, "parquet")),
    "hf-csv": ({"dataset": "hf"}, write_table),
    "imagefolder": ({"dataset": "imagefolder", "image-size": 6}, write_images),
    "loader": ({"dataset": "nodeloader:load"}, write_arrays),
}


@pytest.fixture
def loader_module(tmp_path, monkeypatch):
    (tmp_path / "nodeloader.py").write_text(textwrap.dedent(LOADER))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("nodeloader", None)


def federation(tmp_path, kind: str):
    """Server data and each node's own folder (nothing shared); returns run config, node configs, node labels."""
    keys, write = KINDS[kind]
    write(tmp_path / "server", 6, 0)
    labels, nodes = [], []
    for i, n in enumerate(SIZES):
        labels.append(write(tmp_path / f"node{i}", n, 10 + i))
        nodes.append({"partition-id": i, "num-partitions": 2, "data-dir": str(tmp_path / f"node{i}")})
    run = {**RUN, **keys, "data-dir": str(tmp_path / "server"), "label-column": "label"}
    return run, nodes, labels


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_node_trains_on_all_of_its_own_files(tmp_path, loader_module, kind):
    run, nodes, labels = federation(tmp_path, kind)
    for node_config, own_labels in zip(nodes, labels, strict=True):
        node = node_for(node_context(run, node_config))
        assert node.data_dir == node_config["data-dir"]
        assert len(node.data) == len(own_labels)  # all of it: no partition of it
        assert node.data.targets.tolist() == own_labels.tolist()
    seen = {}
    strategy = run_inprocess(run, node_configs=nodes, observers=[Watch(replied=lambda r, replies: seen.update(
        {reply.partition_id: reply.num_examples for reply in replies}))])  # fmt: skip
    assert seen == {0: SIZES[0], 1: SIZES[1]} and np.isfinite(strategy.x).all()


def test_a_node_holding_its_own_data_refuses_another_partition(tmp_path, loader_module):
    run, nodes, _ = federation(tmp_path, "table-csv")
    with pytest.raises(ValueError, match="client-mapping='fixed'"):
        node_for(node_context(run, nodes[0]), partition_id=1)


def test_a_synthetic_federation_ignores_a_node_data_dir(tmp_path):
    """Synthetic federations are generated from the run seed: a node's data-dir (kept for its file datasets) does
    not turn its partition into the whole federation."""
    run = {"dataset": "synthetic-lsq", "algorithm": "fedavg", "num-clients": 2, "clients-per-round": 2,
           "num-server-rounds": 1, "synthetic-dim": 4, "synthetic-samples": 10, "client-mapping": "fixed"}  # fmt: skip
    own = [{"partition-id": i, "num-partitions": 2, "data-dir": str(tmp_path)} for i in (0, 1)]
    plain = [{"partition-id": i, "num-partitions": 2} for i in (0, 1)]
    assert len(node_for(node_context(run, own[0])).data) == 10
    assert run_inprocess(run, node_configs=own).x.tobytes() == run_inprocess(run, node_configs=plain).x.tobytes()
