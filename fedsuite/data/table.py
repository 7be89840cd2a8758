"""dataset='table': train.csv / test.csv (or .parquet) in data-dir, one row per sample; without a test file the data
has no test set (clients then hold out a share of their rows; central evaluation refuses to start).

`label-column` holds the label: integers ≥ 0 or strings (classes, strings numbered in sorted order), or non-integer
numbers (regression). Every other column is a numeric feature, standardised with the training split's mean and std
(a constant feature keeps std 1), except `partition-column` (partition='natural'), which only says whose row it is;
a test file that has it too gives each client its own test rows (`OwnDataset.test_columns`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsuite.data.datasets import DatasetNotFound
from fedsuite.data.own import DataError, LoadedData, OwnDataset, checked

SUFFIXES = (".csv", ".parquet")


def has_split(folder: Path, split: str) -> bool:
    return any((folder / f"{split}{suffix}").is_file() for suffix in SUFFIXES)


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


def frame_data(name: str, train, test, label: str, group: str, where: tuple[Path, Path | None]) -> OwnDataset:
    """Checked, standardised data from two pandas frames (also used by dataset='hf'); test=None: no test set. A test
    frame that has the partition-column keeps it as `test_columns` (each client's own test rows)."""
    frames = [(frame, path) for frame, path in zip((train, test), where, strict=True) if frame is not None]
    for frame, path in frames:
        if label not in frame.columns:
            raise DataError(
                f"label-column={label!r}: {path} has no such column (it has {', '.join(map(str, frame.columns))})"
            )
    if group and group not in train.columns:
        raise DataError(f"partition-column={group!r}: {where[0]} has no such column")
    features = [c for c in train.columns if c not in (label, group)]
    if not features:
        raise DataError(f"dataset={name!r}: {where[0]} has no feature column besides {label!r}")
    for frame, path in frames:
        missing = [c for c in features if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: lacks the feature column(s) {missing[:5]}")
        bad = [c for c in features if not is_numeric_dtype(frame[c]) or is_bool_dtype(frame[c])]
        if bad:
            raise DataError(
                f"{path}: column(s) {bad[:5]} are not numeric; every column but label-column={label!r} must be a number"
            )
    xs = [frame[features].to_numpy(np.float64) for frame, _ in frames]
    for x, (_, path) in zip(xs, frames, strict=True):
        if not np.isfinite(x).all():
            raise DataError(f"{path}: features hold NaN, inf or empty values")
    mean, std = xs[0].mean(axis=0), xs[0].std(axis=0)
    std = np.where(std > 0, std, 1.0)
    y_train, y_test, task, classes = _labels(train[label], None if test is None else test[label], label, where)
    loaded = LoadedData(
        train=(((xs[0] - mean) / std).astype(np.float32), y_train),
        test=None if test is None else (((xs[1] - mean) / std).astype(np.float32), y_test),
        task=task,
        num_classes=classes,
        columns={group: train[group].to_numpy()} if group else {},
        test_columns={group: test[group].to_numpy()} if group and test is not None and group in test.columns else {},
    )
    return checked(name, loaded)


def _labels(train, test, label: str, where: tuple[Path, Path | None]):
    """(train, test labels, task, classes): strings → sorted class numbers; integers → classes; floats → regression.
    test=None (no test set): test labels None."""
    tests = [] if test is None else [test]
    if not all(is_numeric_dtype(column) for column in (train, *tests)):
        names = sorted(set(map(str, train)).union(*(map(str, column) for column in tests)))
        index = {n: i for i, n in enumerate(names)}
        numbered = [np.array([index[str(v)] for v in column], dtype=np.int64) for column in (train, *tests)]
        return numbered[0], numbered[1] if tests else None, "classification", len(names)
    ys = [column.to_numpy(np.float64) for column in (train, *tests)]
    for y, path in zip(ys, where, strict=False):
        if not np.isfinite(y).all():
            raise DataError(f"label-column={label!r}: {path} holds NaN, inf or empty labels")
    if all(np.all(y == np.round(y)) for y in ys):
        classes = int(max(y.max() for y in ys)) + 1
        return ys[0].astype(np.int64), ys[1].astype(np.int64) if tests else None, "classification", classes
    return ys[0], ys[1] if tests else None, "regression", None


def load_table(data_dir: str, label: str, group: str) -> OwnDataset:
    """The table folder `data_dir` (the working directory when empty): train.* and, if there is one, test.*."""
    folder = Path(data_dir).expanduser() if data_dir else Path.cwd()
    train_path = split_file(folder, "train")
    test_path = split_file(folder, "test") if has_split(folder, "test") else None
    test = None if test_path is None else read_frame(test_path)
    return frame_data("table", read_frame(train_path), test, label, group, (train_path, test_path))
