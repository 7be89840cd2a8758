"""The suite's own per-round work made cheaper without changing a number: the final models and every recorded
figure of tiny in-process runs are pinned by hashes taken before the change, and each faster path is checked
against the one it replaces."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)

from fedsuite import testing as kit
from fedsuite.inprocess import run_inprocess
from fedsuite.server.consistency import LEAF, local_consistency
from fedsuite.server.observers import RoundObserver
from fedsuite.server.wire import arrays_of, to_parameters, writable_arrays_of

BN_MODEL = "tests.test_flower_app:bn_regressor"
PINNED_RUNS = {
    "fedavg": {"algorithm": "fedavg"},
    "scaffold": {"algorithm": "scaffold"},
    "fedspeed": {"algorithm": "fedspeed"},
    "fadamgt": {"algorithm": "fadamgt"},
    "fedmim": {"algorithm": "fedmim"},
    "mimesvrg": {"algorithm": "mimesvrg"},  # a query exchange before each round's training
    "fedavg-batchnorm": {"algorithm": "fedavg", "model": BN_MODEL},  # buffers averaged beside the rule
    "fedavg-both-evaluations": {"algorithm": "fedavg", "evaluation": "both", "eval-every": 1},
    "fedavg-secagg": {"algorithm": "fedavg", "secagg": True, "client-mapping": "fixed"},
}
# sha256 of each run's final model, buffers and recorded figures, taken with the code before these changes
# (this project's pinned torch and NumPy on CPU)
PINNED_HASHES = {
    "fedavg": "7ba18fd64718a7d02b9a564db8db0672cdad965624089ca6cc376bf2b0888d66",
    "scaffold": "087da4df3f4a8b3606e2bcabc4e2225dca5b82c548952a13bcb2e320d0ddf3f4",
    "fedspeed": "53b303c13db4eae73f967e1c11305d297d31f0f3a23da7982708510b1eb6d376",
    "fadamgt": "ffbca72dc30ee9d359e442179128b3f11588944dcf5ce6ba37cb1cc569a44eb2",
    "fedmim": "9ac01a01728fb1a0d2bc0c177b04952cb3dad26ccea7a37c7e8931c1351c7177",
    "mimesvrg": "ce1d25ef8e59556881cebd789996b1b10cd686de27cd9fa81c30bec0a23ee4d0",
    "fedavg-batchnorm": "dc95b9409e39f83b54f09e5bd2aa6dbd72bf29cd8c095b8f275c87508d312717",
    "fedavg-both-evaluations": "feed650b49b5ef3ddd96799a466495d3a63b0e5ebbef64d8abd02ce3b5963774",
    "fedavg-secagg": "e6b23b38fc78c7919dc2394a579982d81ea3dad660bd0dc7fc667b183a08f425",
}


class Rows(RoundObserver):
    def __init__(self):
        self.rows: list[dict] = []

    def recorded(self, row: dict) -> None:
        self.rows.append(row)


def run_digest(extra: dict) -> str:
    """sha256 of a tiny run's final model, its averaged buffers and every recorded figure except wall times."""
    rows = Rows()
    strategy = run_inprocess({**kit.PARTIAL, **extra}, observers=[rows])
    digest = hashlib.sha256(np.ascontiguousarray(strategy.x, np.float32).tobytes())
    if strategy.buffers is not None:
        digest.update(np.ascontiguousarray(strategy.buffers, np.float32).tobytes())
    figures = [{k: v for k, v in sorted(row.items()) if "seconds" not in k} for row in rows.rows]
    digest.update(json.dumps(figures, sort_keys=True, default=repr).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("case", PINNED_RUNS)
def test_final_models_and_figures_are_those_of_before(case):
    """Faster wire, reply checks and round figures: the same model, buffers and rows, bit for bit."""
    assert run_digest(PINNED_RUNS[case]) == PINNED_HASHES[case]
