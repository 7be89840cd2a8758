"""Logical clients on any number of SuperNodes: routing of a round's cohort, the fixed mapping's
discovery, and how simulation.run sizes the federation."""

from __future__ import annotations

import pytest
from flwr.server.client_manager import SimpleClientManager

from fedsuite.codec.payload import PARTITION_KEY
from fedsuite.config.run_config import resolve
from fedsuite.run.inprocess import InProcessProxy, node_contexts
from fedsuite.server.app import build_plan, build_strategy
from fedsuite.server.routing import FederationError
from simulation.launcher.flower import federation_size
from tests.helpers import LSQ


def first_round(cfg_dict: dict, num_nodes: int):
    cfg = resolve(cfg_dict)
    strategy = build_strategy(cfg, build_plan(cfg, record=False))
    manager = SimpleClientManager()
    for context in node_contexts(cfg_dict, num_nodes):
        manager.register(InProcessProxy(str(context.node_id), context))
    return strategy, strategy.configure_fit(1, strategy.initialize_parameters(manager), manager)


def test_the_cohort_is_spread_over_the_nodes_without_asking_any(monkeypatch):
    def no_discovery(self, ins, timeout, group_id):
        raise AssertionError("logical mapping must not ask nodes for their partition")

    monkeypatch.setattr(InProcessProxy, "get_properties", no_discovery)
    cfg = {**LSQ, "num-clients": 1000, "clients-per-round": 10}
    strategy, instructions = first_round(cfg, num_nodes=3)
    pids = [int(ins.config[PARTITION_KEY]) for _, ins in instructions]
    assert pids == strategy.plan.sampler.cohort(1)
    per_node = {}
    for proxy, ins in instructions:
        per_node.setdefault(proxy.cid, []).append(int(ins.config[PARTITION_KEY]))
    assert sorted(len(v) for v in per_node.values()) == [3, 3, 4]  # round-robin in node-id order
    for proxy, ins in instructions:  # and the node trains the partition the message names
        res = proxy.fit(ins, None, 1)
        assert res.metrics["partition-id"] == int(ins.config[PARTITION_KEY])


def test_fixed_mapping_ties_each_partition_to_its_own_node():
    cfg = {**LSQ, "num-clients": 4, "clients-per-round": 4, "client-mapping": "fixed"}
    _, instructions = first_round(cfg, num_nodes=4)
    assert {int(ins.config[PARTITION_KEY]): int(proxy.cid) for proxy, ins in instructions} == {0: 0, 1: 1, 2: 2, 3: 3}
    with pytest.raises(FederationError, match="client-mapping='fixed'.*client-mapping='logical'"):
        first_round(cfg, num_nodes=2)  # nodes that say they are 2 of 2 partitions


def test_simulation_size_is_parallelism_not_the_number_of_clients(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert federation_size(resolve({"num-clients": 10_000}), 1.0, 0.0) == 8
    assert federation_size(resolve({"num-clients": 10_000}), 2.0, 0.0) == 4
    assert federation_size(resolve({"num-clients": 3, "clients-per-round": 3}), 1.0, 0.0) == 3
    assert federation_size(resolve({"num-clients": 50, "client-mapping": "fixed"}), 1.0, 0.0) == 50


def test_a_node_with_its_own_data_refuses_another_partition(tmp_path):
    """A deployed SuperNode with its own data (node config data-dir) is one client: under the logical mapping it
    would train other partitions on its data, so it says which mapping to use instead."""
    from flwr.app import RecordDict
    from flwr.common import Context

    from fedsuite.node.app import node_for
    from tests.test_node_data import write_table

    write_table(tmp_path, 20, seed=0)  # the node's own table (synthetic federations ignore a node's data-dir)
    context = Context(1, 1, {"partition-id": 0, "num-partitions": 2, "data-dir": str(tmp_path)}, RecordDict(),
                      {"dataset": "table", "num-clients": 2, "clients-per-round": 2})  # fmt: skip
    assert node_for(context, 0).data_dir == str(tmp_path)
    with pytest.raises(ValueError, match="client-mapping='fixed'"):
        node_for(context, 1)
