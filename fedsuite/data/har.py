"""UCI HAR (Human Activity Recognition Using Smartphones), the published folder layout (docs/reference/protocol.md).

    <data-dir>/UCI HAR Dataset/train/{X_train.txt, y_train.txt, subject_train.txt}
    <data-dir>/UCI HAR Dataset/test/{X_test.txt, y_test.txt, subject_test.txt}

X: one sample per line, 561 whitespace-separated floats; y: one label 1..6 per line, loaded as 0..5. `data-dir`
may also be the `UCI HAR Dataset` folder itself. The official subject-wise split (7352 / 2947) is kept; the
subject files are not needed. Features are standardised with training statistics (fedsuite/data/tabular.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from fedsuite.data.datasets import DEFAULT_DATA_ROOT, DatasetNotFound, corrupt
from fedsuite.data.tabular import Tabular, standardised

HAR_FOLDER = "UCI HAR Dataset"
FEATURES, CLASSES = 561, 6
LAYOUT = f"<data-dir>/{HAR_FOLDER}/{{train,test}}/{{X,y}}_{{train,test}}.txt (UCI HAR layout)"


def har_base(data_dir: str = "") -> Path:
    root = Path(data_dir) if data_dir else DEFAULT_DATA_ROOT
    return root / HAR_FOLDER if (root / HAR_FOLDER).is_dir() else root


def load_har(data_dir: str = "", download: bool = False) -> Tabular:
    if download:
        raise DatasetNotFound(f"dataset='har': no downloader; unpack 'UCI HAR Dataset.zip' so that {LAYOUT} exists")
    base = har_base(data_dir)
    paths = {s: (base / s / f"X_{s}.txt", base / s / f"y_{s}.txt") for s in ("train", "test")}
    missing = [str(p) for pair in paths.values() for p in pair if not p.is_file()]
    if missing:
        raise DatasetNotFound(
            f"dataset='har': {', '.join(missing)} not found; expected {LAYOUT}, or data-dir set to the "
            f"'{HAR_FOLDER}' folder itself"
        )
    (xs, ys), (xt, yt) = (_read_split(*paths[s]) for s in ("train", "test"))
    return standardised("har", xs, ys, xt, yt, CLASSES)


def _read_split(x_path: Path, y_path: Path) -> tuple[np.ndarray, np.ndarray]:
    x = _read_numbers(x_path, ndmin=2)
    if x.shape[1] != FEATURES or not np.isfinite(x).all():
        raise corrupt(x_path, f"expected {FEATURES} finite numbers per line, found {x.shape[1]} columns")
    y = _read_numbers(y_path, ndmin=1)
    if y.ndim != 1 or len(y) != len(x):
        raise corrupt(y_path, f"expected one label per line for the {len(x)} lines of {x_path.name}, found {y.shape}")
    if not np.isin(y, np.arange(1, CLASSES + 1)).all():
        raise corrupt(y_path, f"labels must be whole numbers 1..{CLASSES}")
    return x, y.astype(np.int64) - 1


def _read_numbers(path: Path, ndmin: int) -> np.ndarray:
    try:
        with warnings.catch_warnings():  # an empty file is reported below, not as a numpy warning
            warnings.simplefilter("ignore", UserWarning)
            values = np.loadtxt(path, dtype=np.float64, ndmin=ndmin)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise corrupt(path, err) from err
    if values.size == 0:
        raise corrupt(path, "the file holds no numbers")
    return values
