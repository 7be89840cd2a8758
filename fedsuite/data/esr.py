"""Epileptic Seizure Recognition (UCI), one CSV, used as seizure vs non-seizure
(docs/reference/protocol.md, Datasets and models, Label transforms).

    <data-dir>/Epileptic Seizure Recognition.csv   (or data.csv)
    header ",X1,...,X178,y"; rows "X21.V1.791,135,190,...,4": a string id, 178 EEG values, y in 1..5

y = 1 (seizure activity) is class 1, every other y class 0 ([decision]), with label-transform none or binary.
The set has no official split: a stratified (by y) 80/20 split drawn with the fixed seed SPLIT_SEED, independent of
the run seed, so every run trains and tests on the same rows (11500 rows → 9200 / 2300, as in the LoSAC paper).
Features are standardised with training statistics (fedsuite/data/tabular.py).
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import numpy as np

from fedsuite.data.datasets import DEFAULT_DATA_ROOT, DatasetNotFound, corrupt
from fedsuite.data.tabular import Tabular, standardised

FILE_NAMES = ("Epileptic Seizure Recognition.csv", "data.csv")
FEATURES = 178
SPLIT_SEED, TEST_SHARE = 178, 0.2
HEADER = [f"X{i}" for i in range(1, FEATURES + 1)] + ["y"]


def load_esr(data_dir: str = "", download: bool = False) -> Tabular:
    root = Path(data_dir) if data_dir else DEFAULT_DATA_ROOT
    if download:
        raise DatasetNotFound(f"dataset='esr': no downloader; put '{FILE_NAMES[0]}' (UCI) into {root}")
    path = next((root / n for n in FILE_NAMES if (root / n).is_file()), None)
    if path is None:
        raise DatasetNotFound(
            f"dataset='esr': none of {', '.join(repr(n) for n in FILE_NAMES)} in {root}; expected the UCI CSV "
            f"(header ',X1,...,X{FEATURES},y', one row per id like 'X21.V1.791') in data-dir"
        )
    x, y = read_esr_csv(path)
    train, test = stratified_split(y)
    seizure = (y == 1).astype(np.int64)
    return standardised("esr", x[train], seizure[train], x[test], seizure[test], 2)


def read_esr_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(features (n, 178) float64, y (n,) int64 in 1..5) in file order."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise corrupt(path, err) from err
    if [h.strip() for h in header[1:]] != HEADER:
        raise corrupt(path, f"header must be ',X1,...,X{FEATURES},y', found {','.join(header[:3])},...")
    try:
        with warnings.catch_warnings():  # a header-only file is reported below, not as a numpy warning
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(
                path,
                delimiter=",",
                skiprows=1,
                usecols=range(1, FEATURES + 2),
                quotechar='"',
                dtype=np.float64,
                ndmin=2,
            )
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise corrupt(path, err) from err
    if table.shape[0] == 0 or not np.isfinite(table).all():
        raise corrupt(path, "no rows, or non-numeric values")
    y = table[:, -1]
    if not np.isin(y, np.arange(1, 6)).all():
        raise corrupt(path, "y must be a whole number 1..5 in every row")
    return table[:, :-1], y.astype(np.int64)


def stratified_split(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) row indices: per class, round(TEST_SHARE·n_c) rows drawn with SPLIT_SEED go to test."""
    rng = np.random.default_rng(SPLIT_SEED)
    test = []
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        test.append(rows[: int(round(TEST_SHARE * len(rows)))])
    test_idx = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(len(y)), test_idx), test_idx
