"""Data loaders for `dataset='examples.own_data.loaders:<name>'` (docs/own/data.md).

A loader is any callable returning `fedsuite.data.LoadedData`; fedsuite passes `data_dir` and `seed` when the
signature names them. This one needs no files: two Gaussian blobs per class in 10 dimensions, with a `region`
column for natural partitions (partition='natural' partition-column='region').
"""

from __future__ import annotations

import numpy as np

from fedsuite.data import LoadedData


def blobs(seed: int = 0, classes: int = 3, per_class: int = 400, regions: int = 5) -> LoadedData:
    rng = np.random.default_rng(1234)  # the data stay fixed across run seeds
    centres = rng.normal(0.0, 3.0, size=(classes, 10))
    y = np.repeat(np.arange(classes), per_class)
    x = (centres[y] + rng.normal(size=(len(y), 10))).astype(np.float32)
    order = rng.permutation(len(y))
    x, y = x[order], y[order]
    cut = int(0.8 * len(y))
    region = rng.integers(0, regions, size=cut)
    return LoadedData(train=(x[:cut], y[:cut]), test=(x[cut:], y[cut:]), num_classes=classes,
                      columns={"region": region})  # fmt: skip
