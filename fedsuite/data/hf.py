"""dataset='hf': a Hugging Face `datasets` folder written by `save_to_disk` (a DatasetDict with train and test), or
train.* / test.* files (parquet, csv, json, jsonl) in data-dir, read with the `datasets` library, no network.

`label-column` is the label (a ClassLabel column gives the number of classes); `feature-column` names one column of
numbers or arrays (images, token ids) used as the features as they are; left empty, every other numeric column is a
feature, standardised as dataset='table' does. `partition-column` (partition='natural') says whose row it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsuite.data.datasets import DatasetNotFound
from fedsuite.data.own import DataError, LoadedData, OwnDataset, checked
from fedsuite.data.table import frame_data

FILE_KINDS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def _splits(root: Path):
    import datasets

    if (root / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(root))
        if "train" not in loaded or "test" not in loaded:
            raise DatasetNotFound(f"dataset='hf': {root} holds splits {sorted(loaded)}; need train and test")
        return loaded["train"], loaded["test"], (root / "train", root / "test")
    found = {}
    for split in ("train", "test"):
        for suffix, kind in FILE_KINDS.items():
            if (root / f"{split}{suffix}").is_file():
                found[split] = (kind, root / f"{split}{suffix}")
                break
    if len(found) < 2:
        raise DatasetNotFound(f"dataset='hf': {root} has neither a save_to_disk folder nor train.* and test.* files "
                              f"({', '.join(FILE_KINDS)}); set data-dir to it")  # fmt: skip
    parts = []
    for split in ("train", "test"):
        kind, path = found[split]
        try:
            parts.append(datasets.load_dataset(kind, data_files=str(path), split="train"))
        except Exception as err:
            raise DataError(f"{path}: cannot be read ({type(err).__name__}: {err})".splitlines()[0]) from err
    return parts[0], parts[1], (found["train"][1], found["test"][1])


def load_hf(data_dir: str, label: str, feature: str, group: str) -> OwnDataset:
    root = Path(data_dir).expanduser() if data_dir else Path.cwd()
    train, test, where = _splits(root)
    if not feature:
        return frame_data("hf", train.to_pandas(), test.to_pandas(), label, group, where)
    arrays = []
    for split, path in zip((train, test), where, strict=True):
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
    columns = {group: np.asarray(train.with_format("numpy")[group])} if group else {}
    classes = getattr(train.features.get(label), "num_classes", None)  # a ClassLabel column knows its classes
    return checked("hf", LoadedData(arrays[0], arrays[1], task, classes, columns))
