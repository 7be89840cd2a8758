"""One client-state plan (fedsuite.state.plan) for the launcher, the ServerApp and the clients: the algorithm's
declared state plus the model's own buffers under buffers='local', its size and its folder."""

from __future__ import annotations

import pytest
from flwr.app import RecordDict
from flwr.common import Context

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import server_dataset
from fedsuite.node.app import node_for
from fedsuite.server.app import client_plan
from fedsuite.state.plan import state_plan
from simulation.launcher.preflight import preflight

BN_MODEL = {"model": "examples.own_model.models:bn_cnn", "buffers": "local", "num-clients": 4,
            "clients-per-round": 2}  # fmt: skip


def test_a_stateless_algorithm_keeping_its_buffers_on_disk_gets_the_folder_check(tmp_path):
    """FedAvg keeps nothing of its own, but with buffers='local' every client writes its BatchNorm statistics: the
    preflight checks the folder and prints the estimate (before, it counted the algorithm's vectors only)."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    cfg = resolve({**BN_MODEL, "client-state": "disk", "client-state-dir": str(blocked / "state"),
                   "out-dir": str(tmp_path / "out")})  # fmt: skip
    with pytest.raises(ConfigError, match=r"client-state-dir='.*a-file/state': not writable"):
        preflight(cfg, quiet=True)


def test_the_estimate_counts_the_buffers(tmp_path, capsys):
    cfg = resolve({**BN_MODEL, "client-state": "disk", "client-state-dir": str(tmp_path / "state"),
                   "out-dir": str(tmp_path / "out")})  # fmt: skip
    plan = client_plan(cfg, server_dataset(cfg))
    assert plan.holds and plan.vectors == 0 and plan.extra > 0 and plan.backend == "disk"
    preflight(cfg)
    assert f"client state: N=4 × {plan.extra:,} buffer floats × 4 B × 2" in capsys.readouterr().out
    assert state_plan(resolve({**BN_MODEL, "buffers": "average"}), 100, 10).holds is False


def test_server_and_clients_find_the_same_folder(tmp_path):
    run_config = {**BN_MODEL, "algorithm": "scaffold", "client-state": "disk", "client-state-dir": str(tmp_path)}
    cfg = resolve(run_config)
    server_root = client_plan(cfg, server_dataset(cfg)).root(7)
    node = node_for(Context(7, 1, {}, RecordDict(), run_config), partition_id=2, state_key="7")
    assert node.store.path.parent == server_root == tmp_path
    memory = {**run_config, "client-state": "auto"}
    server_root = client_plan(resolve(memory), server_dataset(cfg)).root(7)
    assert node_for(Context(7, 1, {}, RecordDict(), memory), partition_id=2, state_key="7").store.path.parent == (
        server_root
    )
