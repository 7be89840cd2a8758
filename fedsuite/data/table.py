"""dataset='table': train.csv / test.csv (or .parquet) in data-dir, one row per sample.

`label-column` holds the label: integers ≥ 0 or strings (classes, strings numbered in sorted order), or non-integer
numbers (regression). Every other column is a numeric feature, standardised with the training split's mean and std
(a constant feature keeps std 1), except `partition-column` (partition='natural'), which only says whose row it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsuite.data.datasets import DatasetNotFound
from fedsuite.data.own import DataError, LoadedData, OwnDataset, checked

SUFFIXES = (".csv", ".parquet")


def split_file(folder: Path, split: str) -> Path:
    for suffix in SUFFIXES:
        if (folder / f"{split}{suffix}").is_file():
            return folder / f"{split}{suffix}"
    raise DatasetNotFound(f"dataset='table': {folder} has no {split}.csv or {split}.parquet; set data-dir to it")


def read_frame(path: Path):
    import pandas as pd

    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as err:  # a parser error, an empty or truncated file
        raise DataError(f"{path}: cannot be read as a table ({type(err).__name__}: {err})".splitlines()[0]) from err


def is_numeric_dtype(column) -> bool:
    from pandas.api.types import is_numeric_dtype as numeric

    return bool(numeric(column))


def is_bool_dtype(column) -> bool:
    from pandas.api.types import is_bool_dtype as boolean

    return bool(boolean(column))


def frame_data(name: str, train, test, label: str, group: str, where: tuple[Path, Path]) -> OwnDataset:
    """Checked, standardised data from two pandas frames (also used by dataset='hf')."""
    for frame, path in zip((train, test), where, strict=True):
        if label not in frame.columns:
            raise DataError(
                f"label-column={label!r}: {path} has no such column (it has {', '.join(map(str, frame.columns))})"
            )
    if group and group not in train.columns:
        raise DataError(f"partition-column={group!r}: {where[0]} has no such column")
    features = [c for c in train.columns if c not in (label, group)]
    if not features:
        raise DataError(f"dataset={name!r}: {where[0]} has no feature column besides {label!r}")
    for frame, path in zip((train, test), where, strict=True):
        missing = [c for c in features if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: lacks the feature column(s) {missing[:5]}")
        bad = [c for c in features if not is_numeric_dtype(frame[c]) or is_bool_dtype(frame[c])]
        if bad:
            raise DataError(f"{path}: column(s) {bad[:5]} are not numeric; every column but label-column="
                            f"{label!r} must be a number")  # fmt: skip
    x_train = train[features].to_numpy(np.float64)
    x_test = test[features].to_numpy(np.float64)
    for x, path in ((x_train, where[0]), (x_test, where[1])):
        if not np.isfinite(x).all():
            raise DataError(f"{path}: features hold NaN, inf or empty values")
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    y_train, y_test, task, classes = _labels(train[label], test[label], label, where)
    loaded = LoadedData(
        train=(((x_train - mean) / std).astype(np.float32), y_train),
        test=(((x_test - mean) / std).astype(np.float32), y_test),
        task=task,
        num_classes=classes,
        columns={group: train[group].to_numpy()} if group else {},
    )
    return checked(name, loaded)


def _labels(train, test, label: str, where: tuple[Path, Path]):
    """(train, test labels, task, classes): strings → sorted class numbers; integers → classes; floats → regression."""
    if not is_numeric_dtype(train) or not is_numeric_dtype(test):
        names = sorted(set(map(str, train)) | set(map(str, test)))
        index = {n: i for i, n in enumerate(names)}
        return (np.array([index[str(v)] for v in train]), np.array([index[str(v)] for v in test]),
                "classification", len(names))  # fmt: skip
    y_train, y_test = train.to_numpy(np.float64), test.to_numpy(np.float64)
    for y, path in ((y_train, where[0]), (y_test, where[1])):
        if not np.isfinite(y).all():
            raise DataError(f"label-column={label!r}: {path} holds NaN, inf or empty labels")
    if np.all(y_train == np.round(y_train)) and np.all(y_test == np.round(y_test)):
        classes = int(max(y_train.max(), y_test.max())) + 1
        return y_train.astype(np.int64), y_test.astype(np.int64), "classification", classes
    return y_train, y_test, "regression", None


def load_table(data_dir: str, label: str, group: str) -> OwnDataset:
    folder = Path(data_dir).expanduser() if data_dir else Path.cwd()
    paths = (split_file(folder, "train"), split_file(folder, "test"))
    return frame_data("table", read_frame(paths[0]), read_frame(paths[1]), label, group, paths)
