"""Your own data: what a `dataset='package.module:loader'` returns (`LoadedData`), checked and turned into the
dataset object every other part of fedsuite reads (`OwnDataset`, the same interface as `Images` and `Tabular`).

A loader is any importable callable; it is called with the keyword arguments it names among `data_dir` and `seed`
(what its result may depend on: a process loads it once per data-dir and seed) and returns a `LoadedData`:

    train, test     (features, targets) pairs of tensors / numpy arrays, or torch Datasets of (x, y) items;
                    test=None: the data has no test set (central evaluation then refuses to start; with
                    evaluation='federated' each client tests on a local-test-fraction share of its rows)
    task            'classification' (integer labels in [0, num_classes)) or 'regression' (float targets)
    num_classes     classification: the number of classes (default: largest label + 1)
    columns         optional per-training-sample metadata, name → one value per sample; partition='natural' makes
                    one client per distinct value of columns[partition-column]
    test_columns    optional per-test-sample metadata, the same for the test rows; under partition='natural' a
                    client's federated test data is the test rows whose test_columns[partition-column] value is its

Features are used as given (no normalisation: a loader normalises its own), in float32 unless they are integers
(token ids for a language model stay int64). Every check names the key or the file and fails before training.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsuite.config.import_paths import ImportPathError, load_import_path
from fedsuite.data.datasets import Split

TASKS = ("classification", "regression")


class DataError(ValueError):
    """Own data that cannot be used: one line naming the key or the file."""


@dataclass
class LoadedData:
    """What a `dataset='package.module:loader'` returns (module docstring)."""

    train: Any
    test: Any
    task: str = "classification"
    num_classes: int | None = None
    columns: Mapping[str, Sequence] = field(default_factory=dict)
    test_columns: Mapping[str, Sequence] = field(default_factory=dict)


@dataclass
class OwnDataset:
    """A dataset of one's own, in the interface the nodes, partitions and evaluator read."""

    name: str
    train: Split
    test: Split
    num_classes: int
    task: str = "classification"
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)  # per training sample (natural partitions)
    test_columns: Mapping[str, np.ndarray] = field(default_factory=dict)  # per test sample (clients' own test rows)
    crop_pad: int = 0

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])

    def features(self, split: Split, idx: np.ndarray | None = None, device: str = "cpu") -> torch.Tensor:
        x = split.x if idx is None else split.x[torch.as_tensor(idx, dtype=torch.long)]
        return x.to(device)


def load_from_loader(path: str, data_dir: str, seed: int) -> OwnDataset:
    """Call the loader `path` ('package.module:callable') and check what it returns."""
    loader = _import(path)
    offered = {"data_dir": data_dir, "seed": seed}
    try:
        params = inspect.signature(loader).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in offered.items() if takes_all or k in params}
    except (TypeError, ValueError):
        kwargs = {}
    try:
        loaded = loader(**kwargs)
    except DataError:
        raise
    except Exception as err:
        raise DataError(f"dataset={path!r}: the loader raised {type(err).__name__}: {err}".splitlines()[0]) from err
    if not isinstance(loaded, LoadedData):
        raise DataError(f"dataset={path!r}: the loader returned {type(loaded).__name__}, not a "
                        "fedsuite.data.own.LoadedData")  # fmt: skip
    return checked(path, loaded)


def _import(path: str):
    try:
        target = load_import_path("dataset", path, shape="'package.module:loader'")
    except ImportPathError as err:
        raise DataError(str(err)) from err
    if not callable(target):
        raise DataError(f"dataset={path!r}: {type(target).__name__} is not callable; name a function")
    return target


def _tensor(value: Any, what: str) -> torch.Tensor:
    try:
        if isinstance(value, torch.Tensor):
            t = value
        else:
            array = np.asarray(value)
            t = torch.as_tensor(array if array.flags.writeable else array.copy())  # a read-only view (pandas)
    except (TypeError, ValueError, RuntimeError) as err:
        raise DataError(f"{what}: not an array of numbers ({err})") from err
    return t.detach().cpu()


def _pairs(data: Any, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(features, targets) from a pair of arrays or a torch Dataset of (x, y) items."""
    if isinstance(data, tuple | list) and len(data) == 2:
        return _tensor(data[0], f"{what} features"), _tensor(data[1], f"{what} targets")
    if isinstance(data, torch.utils.data.Dataset):
        items = [data[i] for i in range(len(data))]  # type: ignore[arg-type]
        if not items:
            raise DataError(f"{what}: the Dataset is empty")
        xs = torch.stack([_tensor(x, f"{what} features") for x, _ in items])
        ys = _tensor([float(y) if isinstance(y, float) else int(y) for _, y in items], f"{what} targets")
        return xs, ys
    raise DataError(f"{what}: expected a (features, targets) pair or a torch Dataset, got {type(data).__name__}")


def checked(name: str, loaded: LoadedData) -> OwnDataset:
    """The checks every own dataset passes: sizes agree, features finite, labels in [0, classes)."""
    if loaded.task not in TASKS:
        raise DataError(f"dataset={name!r}: task={loaded.task!r}; allowed are {', '.join(TASKS)}")
    splits = {}
    for which in ("train", "test"):
        if which == "test" and loaded.test is None:  # no test set: an empty one shaped like the training set
            splits["test"] = Split(splits["train"].x[:0], splits["train"].y[:0])
            continue
        x, y = _pairs(getattr(loaded, which), f"dataset={name!r} {which}")
        if len(x) != len(y) or len(y) == 0:
            no_test = "; test=None if there is no test set" if which == "test" else ""
            raise DataError(f"dataset={name!r} {which}: {len(x)} feature rows but {len(y)} targets (need ≥ 1, "
                            f"equal{no_test})")  # fmt: skip
        if x.is_floating_point() or x.is_complex():
            x = x.float()
            if not bool(torch.isfinite(x).all()):
                raise DataError(f"dataset={name!r} {which}: features hold NaN or inf values")
        if loaded.task == "classification":
            if y.is_floating_point() and not bool((y == y.round()).all()):
                raise DataError(f"dataset={name!r} {which}: classification labels must be integers")
            y = y.long()
        else:
            y = y.float()
            if not bool(torch.isfinite(y).all()):
                raise DataError(f"dataset={name!r} {which}: targets hold NaN or inf values")
        splits[which] = Split(x, y.reshape(-1))
    if loaded.task == "classification":
        labels = torch.cat([splits["train"].y, splits["test"].y])
        classes = int(loaded.num_classes) if loaded.num_classes is not None else int(labels.max()) + 1
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= classes:
            raise DataError(f"dataset={name!r}: labels span [{low}, {high}], outside [0, {classes}) "
                            f"(num_classes={classes})")  # fmt: skip
    else:
        classes = 1
    columns = _columns(name, loaded.columns, len(splits["train"]), "columns", "training")
    test_columns = _columns(name, loaded.test_columns, len(splits["test"]), "test_columns", "test")
    return OwnDataset(name, splits["train"], splits["test"], classes, loaded.task, columns, test_columns)


def _columns(name: str, given: Mapping[str, Sequence], samples: int, key: str, which: str) -> dict[str, np.ndarray]:
    """Per-sample metadata as numpy arrays, one value per `which` sample each."""
    columns = {}
    for column, values in dict(given).items():
        values = np.asarray(values)
        count = len(values) if values.ndim else 0
        if count != samples or (samples == 0 and values.ndim == 0):
            raise DataError(f"dataset={name!r}: {key}[{str(column)!r}] has {count} values for {samples} {which} "
                            "samples (one per sample)")  # fmt: skip
        columns[str(column)] = values
    return columns
