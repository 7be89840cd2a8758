"""Label transforms for the LoSAC studies (docs/reference/protocol.md, Label transforms), applied once to a decoded
dataset.

`binary` maps each dataset's labels to {0, 1} by the threshold that page gives (Fashion-MNIST: for the DLG study,
label ≤ 4 vs > 4). Thresholds are on the labels as loaded, i.e. after a loader's own shift (HAR files hold 1..6,
loaded as 0..5). ESR is loaded binary already (seizure = 1), so its rule is the identity.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import torch

from fedsuite.config.schema import BINARY_LABEL_DATASETS

# dataset -> largest loaded label that becomes class 0 (None: labels are already 0/1)
BINARY_THRESHOLDS: dict[str, int | None] = {
    "mnist": 5,  # label ≤ 5 → 0
    "fashion-mnist": 4,  # the DLG study (docs/dlg/index.md): label ≤ 4 → 0
    "har": 2,  # file label ≤ 3 → 0; files hold 1..6, loaded as 0..5
    "esr": None,  # [decision]: seizure (file y = 1) → 1, loaded so by fedsuite/data/esr.py
}
assert set(BINARY_THRESHOLDS) == set(BINARY_LABEL_DATASETS), "keep config.BINARY_LABEL_DATASETS in step"

D = TypeVar("D")


def binary_labels(name: str, y: torch.Tensor) -> torch.Tensor:
    if name not in BINARY_THRESHOLDS:
        raise ValueError(
            f"label-transform='binary' is not defined for dataset={name!r}; defined for {', '.join(BINARY_THRESHOLDS)}"
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
