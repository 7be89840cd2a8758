"""Label transforms for the LoSAC studies (ALGORITHMS.md §2.3), applied once to a decoded dataset.

`binary` maps each dataset's labels to {0, 1} by the threshold §2.3 gives (Fashion-MNIST: issue 8's DLG study,
label ≤ 4 vs > 4). Thresholds are on the labels as loaded, i.e. after a loader's own shift.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import torch

from fedsuite.config import BINARY_LABEL_DATASETS

# dataset -> largest loaded label that becomes class 0 (None: labels are already 0/1)
BINARY_THRESHOLDS: dict[str, int | None] = {
    "mnist": 5,  # §2.3: label ≤ 5 → 0
    "fashion-mnist": 4,  # issue 8 DLG study: label ≤ 4 → 0
}
assert set(BINARY_THRESHOLDS) == set(BINARY_LABEL_DATASETS), "keep config.BINARY_LABEL_DATASETS in step"

D = TypeVar("D")


def binary_labels(name: str, y: torch.Tensor) -> torch.Tensor:
    if name not in BINARY_THRESHOLDS:
        raise ValueError(
            f"label-transform='binary' is not defined for dataset={name!r}; defined for "
            f"{', '.join(BINARY_THRESHOLDS)} (ALGORITHMS.md §2.3)"
        )
    threshold = BINARY_THRESHOLDS[name]
    return y.clone() if threshold is None else (y > threshold).to(torch.int64)


def apply_label_transform(dataset: D, transform: str) -> D:
    """`dataset` itself for 'none'; for 'binary' a copy with both splits relabelled and num_classes = 2."""
    if transform == "none":
        return dataset
    if transform != "binary":
        raise ValueError(f"label-transform={transform!r}: allowed values are none, binary")
    name = dataset.name
    train = replace(dataset.train, y=binary_labels(name, dataset.train.y))
    test = replace(dataset.test, y=binary_labels(name, dataset.test.y))
    return replace(dataset, train=train, test=test, num_classes=2)
