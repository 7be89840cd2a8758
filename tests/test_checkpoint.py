"""Checkpoint and exact resume (docs/running/checkpoints.md): for every algorithm in the registry, a run stopped after
round r and resumed to R ends bit-identical to the uninterrupted R-round run (model, algorithm state, client state)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.registry import costs
from fedsuite.registry.known import ALGORITHMS
from fedsuite.results import checkpoint
from fedsuite.run.inprocess import run_inprocess
from fedsuite.state.files import read_arrays

TINY = {
    "dataset": "synthetic-lsq",
    "num-clients": 6,
    "clients-per-round": 3,
    "synthetic-dim": 5,
    "synthetic-samples": 12,
    "batch-size": 4,
    "local-steps": 3,
    "lr": 0.02,
    "num-server-rounds": 5,
    "eval-every": 1000,
    "checkpoint-every": 2,
}


same = kit.identical  # bitwise equality of checkpointable values (fedsuite.testing.kit)


def client_files(folder) -> dict[str, dict[str, np.ndarray]]:
    ckpt = checkpoint.load(folder)
    out = {}
    for path in sorted(ckpt.client_state.glob("partition-*.state")):
        out[path.name] = read_arrays(path)
    return out


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_stopped_and_resumed_run_equals_the_uninterrupted_one(algorithm, tmp_path):
    cfg = {**TINY, "algorithm": algorithm, "out-dir": str(tmp_path)}
    full = run_inprocess({**cfg, "run-name": "full"}, record=True)
    run_inprocess({**cfg, "run-name": "part", "num-server-rounds": 3}, record=True)  # stops after round 3
    assert checkpoint.load(tmp_path / "part").server_round == 3
    resumed = run_inprocess({**cfg, "run-name": "other-name", "resume-from": str(tmp_path / "part")}, record=True)

    assert resumed.x.tobytes() == full.x.tobytes()
    state_full, state_resumed = full.state_dict(), resumed.state_dict()
    assert state_full.keys() == state_resumed.keys()
    differ = [k for k in state_full if not same(state_full[k], state_resumed[k])]
    assert not differ, f"algorithm state differs in {differ}"
    assert same(client_files(tmp_path / "full"), client_files(tmp_path / "part"))
    if costs.client_state_vectors(algorithm, full.plan.run_config):
        assert client_files(tmp_path / "full")  # the comparison above compared something
    rows = [json.loads(line) for line in (tmp_path / "part" / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4, 5]  # the resumed run continues the folder's rows
    summary = json.loads((tmp_path / "part" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 5
    assert "resume-from=" in summary["resume_command"]


def test_resume_refuses_a_changed_config_and_a_missing_checkpoint(tmp_path):
    cfg = {**TINY, "algorithm": "scaffold", "out-dir": str(tmp_path), "run-name": "a", "num-server-rounds": 2}
    run_inprocess(cfg, record=True)
    with pytest.raises(checkpoint.CheckpointError, match=r"differs in lr=0\.5"):
        run_inprocess({**cfg, "lr": 0.5, "num-server-rounds": 4, "resume-from": str(tmp_path / "a")}, record=True)
    with pytest.raises(checkpoint.CheckpointError, match="num-server-rounds must be larger"):
        run_inprocess({**cfg, "resume-from": str(tmp_path / "a")}, record=True)
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint"):
        run_inprocess({**cfg, "num-server-rounds": 4, "resume-from": str(tmp_path)}, record=True)


def test_keys_that_do_not_change_the_numbers_may_change_on_resume():
    ckpt = checkpoint.Checkpoint(Path("/ckpt"), 2, {}, [], {"lr": 0.1, "num-server-rounds": 2}, None)
    free = {"tensorboard": True, "wandb-mode": "offline", "wandb-project": "p", "round-timeout": 60.0}
    checkpoint.check_compatible(ckpt, {"lr": 0.1, "num-server-rounds": 4, **free})  # tracking switched on: fine
    with pytest.raises(checkpoint.CheckpointError, match=r"differs in lr=0\.2"):
        checkpoint.check_compatible(ckpt, {"lr": 0.2, "num-server-rounds": 4, **free})


def test_a_key_added_since_the_checkpoint_counts_as_its_default():
    ckpt = checkpoint.Checkpoint(Path("/ckpt"), 2, {}, [], {"lr": 0.1, "num-server-rounds": 2}, None)
    checkpoint.check_compatible(ckpt, {"lr": 0.1, "num-server-rounds": 4, "batch-messages": 1})  # the default
    with pytest.raises(checkpoint.CheckpointError, match=r"differs in batch-messages=2 \(checkpoint: 1\)"):
        checkpoint.check_compatible(ckpt, {"lr": 0.1, "num-server-rounds": 4, "batch-messages": 2})


def test_state_of_an_unknown_type_is_an_error_not_silently_dropped():
    with pytest.raises(checkpoint.CheckpointError, match="handle is a object"):
        checkpoint.encode_state({"table": {1: np.ones(2)}, "handle": object()})
