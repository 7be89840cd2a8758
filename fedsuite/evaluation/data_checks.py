"""Evaluation data that exists: a run whose validation split or federated test data is empty for every client
would train and report nothing about it. `check_evaluation_data` says so before any training (docs/evaluation.md).

Both are drawn from each client's local rows by fedsuite.data.holdout: a share s of n rows holds out floor(s·n)
rows, so a small share of small clients holds out nothing. Federated test data is a client's own test rows where
the data has them (a node's data-dir, natural partitions with test rows), else its local-test-fraction share.
Only checked where the server holds the data (server-data=true); the nodes' own data is theirs to check.
"""

from __future__ import annotations

import math

import numpy as np

from fedsuite.config.run_config import Config, ConfigError
from fedsuite.data.holdout import held_out_count


def check_evaluation_data(cfg: Config, dataset=None) -> None:
    """Raise ConfigError (one line naming the key, the clients' sizes and the smallest share that holds out a row)
    when validation-fraction > 0 and every client's validation share is empty, or when evaluation is federated
    and every client's test data is empty."""
    evaluation = cfg.evaluation
    wants_validation = evaluation.validation_fraction > 0
    if not cfg.data.on_server or not (wants_validation or evaluation.federated):
        return
    from fedsuite.data import client_partition, client_test_rows, load_dataset

    dataset = load_dataset(cfg) if dataset is None else dataset
    sizes = np.array([len(p) for p in client_partition(cfg, dataset)])
    largest = int(sizes.max()) if sizes.size else 0
    validation = [held_out_count(int(n), evaluation.validation_fraction) for n in sizes]
    if wants_validation and not any(validation):
        raise ConfigError(
            f"validation-fraction={evaluation.validation_fraction:g}: every client's validation share is empty "
            f"(floor(share × rows) = 0 for clients of at most {largest} rows); use validation-fraction >= "
            f"{_smallest_share(largest):.3g}, or fewer clients"
        )
    if not evaluation.federated:
        return
    for pid, n in enumerate(sizes):
        own = client_test_rows(cfg, dataset, pid, None)
        if own is not None and len(own):
            return
        if own is None and held_out_count(int(n), evaluation.local_test_fraction, validation[pid]):
            return
    raise ConfigError(
        f"evaluation={evaluation.mode!r}: every client's test data is empty (local-test-fraction="
        f"{evaluation.local_test_fraction:g} of at most {largest} rows, after validation, holds out none); use "
        f"local-test-fraction >= {_smallest_share(largest):.3g}, fewer clients, or evaluation='central'"
    )


def _smallest_share(rows: int) -> float:
    """The smallest share s with floor(s·rows) >= 1 (rounded up to three digits)."""
    if rows < 2:
        return 1.0
    return math.ceil(1000 / rows) / 1000
