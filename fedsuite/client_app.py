"""Flower ClientApp: run config + node config → the algorithm's NumPyClient.

Node config keys: `partition-id`, `num-partitions` (Flower fills them in simulation; a SuperNode gets them
with --node-config) and optionally `data-dir`, a folder with the node's own copy of the dataset files
(then the node trains on all of it instead of a partition of the run's dataset).
"""

from __future__ import annotations

from flwr.client import ClientApp
from flwr.common import Context

from fedsuite import registry
from fedsuite.config import resolve
from fedsuite.node import ClientNode


def node_from_context(context: Context) -> ClientNode:
    nc = context.node_config
    if "partition-id" not in nc or "num-partitions" not in nc:
        raise KeyError("node config needs partition-id and num-partitions (SuperNode --node-config)")
    data_dir = str(nc["data-dir"]) if nc.get("data-dir") else None
    return ClientNode(resolve(context.run_config), int(nc["partition-id"]), int(nc["num-partitions"]), data_dir)


def client_fn(context: Context):
    node = node_from_context(context)
    return registry.build_client(node.cfg, node).to_client()


app = ClientApp(client_fn=client_fn)
