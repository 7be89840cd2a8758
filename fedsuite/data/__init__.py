"""Datasets and partitions, decoded and computed once per process (Ray actors reuse them across messages)."""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

from fedsuite.config.import_paths import is_import_path
from fedsuite.config.run_config import Config, ConfigError, with_num_clients
from fedsuite.config.schema import DATA_FORMATS
from fedsuite.data.colour import client_coefficients
from fedsuite.data.datasets import (
    DatasetNotFound,
    Images,
    load_cifar,
    load_fashion_mnist,
    load_mnist,
    load_tinyimagenet,
)
from fedsuite.data.esr import load_esr
from fedsuite.data.har import load_har
from fedsuite.data.hf import load_hf
from fedsuite.data.holdout import local_splits
from fedsuite.data.imagefolder import load_imagefolder
from fedsuite.data.labels import apply_label_transform
from fedsuite.data.own import DataError, LoadedData, OwnDataset, load_from_loader
from fedsuite.data.partition import make_partition, natural
from fedsuite.data.shape_only import ShapeOnly, shape_only
from fedsuite.data.synthetic import SyntheticFederation, make_federation, make_lowrank
from fedsuite.data.table import load_table
from fedsuite.data.tabular import Tabular

Dataset = Images | Tabular | SyntheticFederation | OwnDataset

__all__ = [
    "Dataset", "DatasetNotFound", "DataError", "LoadedData", "load_dataset", "client_partition", "partition_sizes",
    "client_inputs", "with_data_clients", "server_dataset", "ShapeOnly", "client_test_rows", "has_test_set",
    "validation_rows",
]  # fmt: skip


def load_dataset(cfg: Config, data_dir: str | None = None) -> Dataset:
    """The run's dataset; `data_dir` (a node's own folder) overrides the run config's."""
    source, syn = cfg.data, cfg.synthetic
    if source.name == "synthetic-lowrank":
        return _lowrank(syn.num_clients, syn.samples, syn.lowrank_size, syn.lowrank_rank, syn.noise, syn.weight_decay,
                        syn.seed)  # fmt: skip
    if cfg.is_synthetic:
        return _synthetic(source.name.removeprefix("synthetic-"), syn.num_clients, syn.samples, syn.dim,
                          syn.heterogeneity, syn.noise, syn.weight_decay, syn.seed)  # fmt: skip
    data_dir = source.data_dir if data_dir is None else data_dir
    if source.name in DATA_FORMATS or is_import_path(source.name):
        return _own(source.name, data_dir, source.image_size, source.label_column, source.feature_column,
                    source.partition_column, cfg.seed)  # fmt: skip
    return _labelled(source.name, data_dir, source.download, source.label_transform)


def server_dataset(cfg: Config) -> Dataset | ShapeOnly:
    """What the server holds: the run's dataset, or with server-data=false only its shapes (input-shape,
    num-classes), read from no file."""
    if not cfg.data.on_server:
        return shape_only(cfg.data.name, cfg.data.input_shape, cfg.data.num_classes)
    dataset = load_dataset(cfg)
    if cfg.evaluation.central and not has_test_set(dataset):
        raise ConfigError(
            f"evaluation={cfg.evaluation.mode!r} tests on the server's test set, but dataset={cfg.data.name!r} has "
            "none (e.g. no test.csv in data-dir): use evaluation='federated' (each client then holds out "
            "local-test-fraction of its data)"
        )
    return dataset


@lru_cache(maxsize=2)
def _own(name: str, data_dir: str, image_size: int, label: str, feature: str, group: str, seed: int) -> Dataset:
    """Own data: a standard layout in data-dir, or a loader's (fedsuite.data.own)."""
    if name == "imagefolder":
        return load_imagefolder(data_dir, image_size)
    if name == "table":
        return load_table(data_dir, label, group)
    if name == "hf":
        return load_hf(data_dir, label, feature, group)
    return load_from_loader(name, data_dir, seed)


@lru_cache(maxsize=2)
def _labelled(name: str, data_dir: str, download: bool, transform: str) -> Images | Tabular:
    return apply_label_transform(_images(name, data_dir, download), transform)  # docs/reference/protocol.md


@lru_cache(maxsize=2)
def _images(name: str, data_dir: str, download: bool) -> Images | Tabular:
    if name == "fashion-mnist":
        return load_fashion_mnist(data_dir, download)
    if name == "mnist":
        return load_mnist(data_dir, download)
    if name in ("cifar10", "cifar100"):
        return load_cifar(name, data_dir, download)
    if name == "tinyimagenet":
        return load_tinyimagenet(data_dir, download)
    if name == "har":
        return load_har(data_dir, download)
    if name == "esr":
        return load_esr(data_dir, download)
    raise ValueError(f"dataset={name!r}: no loader")


@lru_cache(maxsize=2)
def _synthetic(kind, num_clients, samples, dim, heterogeneity, noise, wd, seed) -> SyntheticFederation:
    return make_federation(kind, num_clients, samples, dim, heterogeneity, noise, wd, seed)


@lru_cache(maxsize=1)
def _lowrank(num_clients, samples, size, rank, noise, wd, seed) -> SyntheticFederation:
    return make_lowrank(num_clients, samples, size, rank, noise, wd, seed)


_PARTITIONS: dict[tuple, list[np.ndarray]] = {}


def client_partition(cfg: Config, dataset: Dataset) -> list[np.ndarray]:
    """Index arrays of every client's training data (the synthetic federations bring their own)."""
    if isinstance(dataset, SyntheticFederation):
        return dataset.client_parts
    labels = dataset.train.y.numpy()
    split = cfg.partitioning
    if split.scheme == "natural":
        parts = natural(_groups(cfg, dataset))
        if len(parts) != split.num_clients:
            with_num_clients(cfg, len(parts), f"partition='natural' on {cfg.data.partition_column!r}")  # explicit?
        return parts
    # keyed by the labels themselves: two copies of a dataset with equal names and sizes may differ (files, transforms)
    key = (dataset.name, hashlib.sha1(labels.tobytes()).hexdigest(), split)
    if key not in _PARTITIONS:
        _PARTITIONS[key] = make_partition(
            labels, split.scheme, split.num_clients, split.seed, split.alpha, split.balanced, split.mixture
        )
    return _PARTITIONS[key]


def _groups(cfg: Config, dataset: Dataset) -> np.ndarray:
    column = cfg.data.partition_column
    columns = getattr(dataset, "columns", {})
    if column not in columns:
        have = ", ".join(columns) or "none"
        raise ConfigError(f"partition='natural': dataset={dataset.name!r} has no column partition-column={column!r} "
                          f"(its columns: {have})")  # fmt: skip
    return columns[column]


def with_data_clients(cfg: Config) -> Config:
    """`cfg` with num-clients from the data under partition='natural' (one client per distinct value), else `cfg`;
    an explicit num-clients that differs is a ConfigError. With server-data=false nothing is read: num-clients is
    the run config's (the nodes hold the data)."""
    if cfg.partitioning.scheme != "natural" or not cfg.data.on_server:
        return cfg
    count = len(np.unique(_groups(cfg, load_dataset(cfg))))
    return with_num_clients(cfg, count, f"partition='natural' on partition-column={cfg.data.partition_column!r}")


def partition_sizes(cfg: Config, dataset: Dataset) -> list[int]:
    return [len(p) for p in client_partition(cfg, dataset)]


def client_inputs(cfg: Config, dataset: Dataset, idx: np.ndarray | None, partition_id: int, device: str):
    """Client `partition_id`'s training inputs on `device`, built once per LocalData; with colour-perturbation,
    its own brightness/saturation (docs/reference/protocol.md, Partitions) applied before normalisation."""
    if cfg.data.colour_perturbation:
        if not isinstance(dataset, Images):
            raise ValueError(f"colour-perturbation: dataset={dataset.name!r} holds no images")
        colour = client_coefficients(cfg.seed, partition_id)
        return dataset.features(dataset.train, idx, device, colour=colour)
    return dataset.features(dataset.train, idx, device)


def has_test_set(dataset) -> bool:
    test = getattr(dataset, "test", None)
    return test is not None and len(test) > 0


def client_test_rows(cfg: Config, dataset: Dataset, partition_id: int, data_dir: str | None) -> np.ndarray | None:
    """Rows of `dataset.test` that are client `partition_id`'s own test split, or None when the data has none for
    it (the client then holds out a local-test-fraction share of its training data): a node's own data-dir's whole
    test set; under partition='natural', the test rows whose partition-column value is the client's, when the
    dataset keeps that column for its test rows (`OwnDataset.test_columns`: a loader's, or a table's / hf folder's
    test split with partition-column)."""
    if data_dir:
        return np.arange(len(dataset.test)) if has_test_set(dataset) else None
    if cfg.partitioning.scheme != "natural":
        return None
    values = np.unique(_groups(cfg, dataset))  # only own data has columns: `dataset` is an OwnDataset
    test_groups = dataset.test_columns.get(cfg.data.partition_column)
    if test_groups is None:
        return None
    rows = np.flatnonzero(test_groups == values[partition_id])
    return rows if len(rows) else None


def validation_rows(cfg: Config, dataset: Dataset, device: str):
    """(inputs, targets) of the union of every client's validation share, in partition order, each client's rows
    as that client sees them (its own colour under colour-perturbation); None when every share is empty. The same
    draw as the clients' (fedsuite.data.holdout: validation comes first, so it does not depend on the test share)."""
    import torch

    fraction = cfg.evaluation.validation_fraction
    inputs, targets = [], []
    for pid, idx in enumerate(client_partition(cfg, dataset)):
        rows = idx[local_splits(len(idx), cfg.seed, pid, fraction).validation]
        if len(rows):
            inputs.append(client_inputs(cfg, dataset, rows, pid, device))
            targets.append(dataset.train.y[torch.as_tensor(rows, dtype=torch.long)])
    if not targets:
        return None
    return torch.cat(inputs), torch.cat(targets)
