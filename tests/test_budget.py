"""A target ε is enforced whatever mechanism spends the budget (docs/privacy.md, The budget): DP-SGD's clients
release nothing past it and the run ends `budget-spent`; client-level DP and DP-SGD together stop at whichever
binds first; a target no mechanism spends is refused in one line; the privacy refusals only the built model shows
(BatchNorm buffers the server would average) come before training and before any results folder, `--check` too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.run.inprocess import run_inprocess
from fedsuite.testing.kit import PARTIAL

pytest.importorskip("dp_accounting")
ROOT = Path(__file__).resolve().parent.parent
DP_SGD = {"dp-sgd": True, "dp-sgd-clip": 1.0}


def _run(tmp_path, changes: dict):
    config = {**PARTIAL, "algorithm": "fedavg", "out-dir": str(tmp_path), "run-name": "r", **changes}
    strategy = run_inprocess(config, record=True)
    folder = tmp_path / "r"
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return strategy, rows, json.loads((folder / "summary.json").read_text())


def test_dp_sgd_past_its_target_in_the_first_round_releases_nothing_and_ends_the_run(tmp_path):
    """σ_s = 0.5: one round brings every client to ε ≈ 54 > 1. Today's main ran to `completed` with that ε."""
    strategy, rows, summary = _run(tmp_path, {**DP_SGD, "dp-sgd-noise": 0.5, "dp-target-epsilon": 1.0,
                                              "num-server-rounds": 3})  # fmt: skip
    assert summary["status"] == "budget-spent", summary
    assert "dp-target-epsilon=1" in summary["reason"] and "not applied" in summary["reason"]
    assert [r["round"] for r in rows] == [0]  # the refused round has no row and moved nothing
    assert np.array_equal(strategy.x, strategy.plan.initial_x)


def test_dp_sgd_stops_before_the_round_that_would_pass_the_target(tmp_path):
    """σ_s = 4: ε after a client's 1, 2, 3 rounds is 2.33, 3.55, 4.65 here; with target 4 the server stops before
    the first round that draws a client for the third time, and no row passes the target."""
    _, rows, summary = _run(tmp_path, {**DP_SGD, "dp-sgd-noise": 4.0, "dp-target-epsilon": 4.0,
                                       "num-server-rounds": 12})  # fmt: skip
    assert summary["status"] == "budget-spent" and "would take client" in summary["reason"], summary
    trained = [r for r in rows if r["round"] > 0]
    assert len(trained) >= 2 and max(r["dp_sgd_epsilon"] for r in trained) <= 4.0
    assert len(trained) < 12


def test_client_level_dp_and_dp_sgd_together_stop_at_whichever_binds_first(tmp_path):
    changes = {**DP_SGD, "dp-sgd-noise": 4.0, "dp": "server", "dp-noise": 3.0, "dp-clip": 0.5,
               "dp-target-epsilon": 4.0, "num-server-rounds": 12}  # fmt: skip
    _, rows, summary = _run(tmp_path, changes)
    assert summary["status"] == "budget-spent"
    trained = [r for r in rows if r["round"] > 0]
    assert trained and all(r["dp_epsilon"] <= 4.0 and r["dp_sgd_epsilon"] <= 4.0 for r in trained)


def test_a_target_with_no_mechanism_spending_a_budget_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        resolve({**PARTIAL, "dp-target-epsilon": 5.0})
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 1 and "dp-target-epsilon=5: no mechanism spends a privacy budget" in lines[0]
    resolve({**PARTIAL, **DP_SGD, "dp-target-epsilon": 5.0})  # DP-SGD spends one: accepted


BN_SERVER_DP = {"model": "examples.own_model.models:bn_cnn", "model-args": "{width=4}", "dp": "server",
                "dp-clip": 1.0, "local-steps": 2, "num-clients": 4, "clients-per-round": 2,
                "num-server-rounds": 1}  # fmt: skip


def test_averaged_batch_norm_buffers_under_client_dp_are_refused_before_any_folder(tmp_path):
    config = {**BN_SERVER_DP, "out-dir": str(tmp_path), "run-name": "r"}
    with pytest.raises(ConfigError, match="buffers='average' would upload without clip or noise; set buffers='local'"):
        run_inprocess(config, record=True)
    assert not (tmp_path / "r").exists()


def test_check_refuses_averaged_batch_norm_buffers_under_client_dp(tmp_path):
    pairs = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in BN_SERVER_DP.items())
    pairs = pairs.replace('"', "'") + f" out-dir='{tmp_path}'"
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "simulation.run", "--check", "-c", pairs], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "set buffers='local'" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
