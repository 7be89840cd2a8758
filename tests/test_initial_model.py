"""Every results folder holds x⁰ (docs/reference/results-folder.md): model-round-0.npy, the flat float32 trainable
parameters every client starts from, so a run can be checked from outside it (lr=0 is refused, so no round shows
x⁰ otherwise)."""

from __future__ import annotations

import numpy as np

from fedsuite.results.folder import INITIAL_MODEL
from fedsuite.run.inprocess import run_inprocess
from fedsuite.testing.kit import PARTIAL


def test_the_results_folder_holds_the_initial_model(tmp_path):
    strategy = run_inprocess({**PARTIAL, "out-dir": str(tmp_path), "run-name": "r"}, record=True)
    x0 = np.load(tmp_path / "r" / INITIAL_MODEL)
    assert x0.dtype == np.float32 and x0.tobytes() == strategy.plan.initial_x.astype(np.float32).tobytes()
    assert not np.array_equal(x0, strategy.x)  # the run moved away from it


def test_a_resumed_run_keeps_it_and_overwrite_replaces_it(tmp_path):
    config = {**PARTIAL, "out-dir": str(tmp_path), "run-name": "r", "checkpoint-every": 1, "num-server-rounds": 1}
    run_inprocess(config, record=True)
    path = tmp_path / "r" / INITIAL_MODEL
    first = path.read_bytes()
    run_inprocess({**config, "num-server-rounds": 2, "resume-from": str(tmp_path / "r")}, record=True)
    assert path.read_bytes() == first
    run_inprocess({**config, "seed": 1, "overwrite": True}, record=True)
    assert path.read_bytes() != first  # the new run's own x⁰ (another seed)
