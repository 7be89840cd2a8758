"""dataset='hf': a Hugging Face `datasets` folder written by `save_to_disk` (a DatasetDict with train and test), or
train.* / test.* files (parquet, csv, json, jsonl) in data-dir, read with the `datasets` library, no network. Without
a test split the data has no test set (clients then hold out a share of their rows; central evaluation refuses).

`label-column` is the label (a ClassLabel column gives the number of classes); `feature-column` names one column of
numbers or arrays (images, token ids) used as the features as they are; left empty, every other numeric column is a
feature, standardised as dataset='table' does. `partition-column` (partition='natural') says whose row it is; a
test split that has it too gives each client its own test rows (`OwnDataset.test_columns`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsuite.data.datasets import DatasetNotFound
from fedsuite.data.own import DataError, LoadedData, OwnDataset, checked
from fedsuite.data.table import frame_data

FILE_KINDS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def _splits(root: Path):
    """(train, test or None, (train path, test path or None)): a save_to_disk DatasetDict or train.* / test.* files."""
    import datasets

    if (root / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(root))
        if "train" not in loaded:
            raise DatasetNotFound(f"dataset='hf': {root} holds splits {sorted(loaded)}; need train (and test, if any)")
        if "test" not in loaded:
            return loaded["train"], None, (root / "train", None)
        return loaded["train"], loaded["test"], (root / "train", root / "test")
    found = {}
    for split in ("train", "test"):
        for suffix, kind in FILE_KINDS.items():
            if (root / f"{split}{suffix}").is_file():
                found[split] = (kind, root / f"{split}{suffix}")
                break
    if "train" not in found:
        raise DatasetNotFound(f"dataset='hf': {root} has neither a save_to_disk folder nor train.* (and test.*) files "
                              f"({', '.join(FILE_KINDS)}); set data-dir to it")  # fmt: skip
    parts = {}
    for split, (kind, path) in found.items():
        try:
            parts[split] = datasets.load_dataset(kind, data_files=str(path), split="train")
        except Exception as err:
            raise DataError(f"{path}: cannot be read ({type(err).__name__}: {err})".splitlines()[0]) from err
    test_path = found["test"][1] if "test" in found else None
    return parts["train"], parts.get("test"), (found["train"][1], test_path)


def load_hf(data_dir: str, label: str, feature: str, group: str) -> OwnDataset:
    root = Path(data_dir).expanduser() if data_dir else Path.cwd()
    train, test, where = _splits(root)
    if not feature:
        return frame_data("hf", train.to_pandas(), None if test is None else test.to_pandas(), label, group, where)
    splits = [(split, path) for split, path in zip((train, test), where, strict=True) if split is not None]
    arrays = []
    for split, path in splits:
        for column in (label, feature):
            if column not in split.column_names:
                key = "label-column" if column == label else "feature-column"
                raise DataError(f"{key}={column!r}: {path} has no such column (it has {', '.join(split.column_names)})")
        try:
            x = np.asarray(split.with_format("numpy")[feature])
        except (ValueError, TypeError) as err:
            raise DataError(f"feature-column={feature!r}: {path} holds values of different shapes ({err})") from err
        if not np.issubdtype(x.dtype, np.number):
            raise DataError(f"feature-column={feature!r}: {path} holds non-numeric values ({x.dtype})")
        arrays.append((x, np.asarray(split.with_format("numpy")[label])))
    if group and group not in train.column_names:
        raise DataError(f"partition-column={group!r}: {where[0]} has no such column")
    task = "classification" if np.issubdtype(arrays[0][1].dtype, np.integer) else "regression"
    columns = {group: _column(train, group)} if group else {}
    test_columns = {group: _column(test, group)} if group and test is not None and group in test.column_names else {}
    classes = getattr(train.features.get(label), "num_classes", None)  # a ClassLabel column knows its classes
    test_arrays = arrays[1] if test is not None else None
    return checked("hf", LoadedData(arrays[0], test_arrays, task, classes, columns, test_columns))


def _column(split, name: str) -> np.ndarray:
    return np.asarray(split.with_format("numpy")[name])
