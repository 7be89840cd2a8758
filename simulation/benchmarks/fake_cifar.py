"""Random CIFAR-10-shaped files for timing: torchvision's python layout (`cifar-10-batches-py/data_batch_1..5` and
`test_batch`, pickled dicts of uint8 rows of 3×32×32 and integer labels), so `dataset='cifar10' data-dir=<folder>`
loads them like the real data set. Timing does not depend on the pixels; no accuracy means anything on them."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

TRAIN_FILES = 5


def write_fake_cifar10(folder: Path | str, train_rows: int = 50_000, test_rows: int = 10_000, seed: int = 0) -> Path:
    """Write the files under `folder` (train rows split over the five training batches); returns `folder`."""
    folder = Path(folder)
    base = folder / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sizes = [len(part) for part in np.array_split(np.arange(train_rows), TRAIN_FILES)]
    names = [f"data_batch_{i}" for i in range(1, TRAIN_FILES + 1)] + ["test_batch"]
    for name, rows in zip(names, [*sizes, test_rows], strict=True):
        batch = {
            b"data": rng.integers(0, 256, (rows, 3 * 32 * 32), dtype=np.uint8),
            b"labels": rng.integers(0, 10, rows).tolist(),
        }
        with open(base / name, "wb") as f:
            pickle.dump(batch, f)
    return folder
