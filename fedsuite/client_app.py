"""Flower ClientApp: run config + node config → the algorithm's NumPyClient.

Node config keys: `partition-id`, `num-partitions` (Flower fills them in simulation; a SuperNode gets them
with --node-config), optionally `data-dir` (a folder with the node's own copy of the dataset files; the node
then trains on all of it instead of a partition of the run's dataset) and `client-state-dir` (where this
node's persistent client state goes when it is kept on disk: in a `run-<run id>` subfolder).
"""

from __future__ import annotations

import tempfile
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.client import ClientApp
from flwr.common import Context

from fedsuite import registry
from fedsuite.config import Config, resolve
from fedsuite.node import ClientNode
from fedsuite.state import DiskStore, choose_backend

STATE_RECORD = "fedsuite.client-state"


class ContextStateStore(MutableMapping):
    """Named arrays in the node's Flower Context.state (one ArrayRecord), created on first write."""

    def __init__(self, context: Context):
        self.context = context

    def _record(self, create: bool = False) -> ArrayRecord | None:
        if STATE_RECORD not in self.context.state and create:
            self.context.state[STATE_RECORD] = ArrayRecord()
        return self.context.state[STATE_RECORD] if STATE_RECORD in self.context.state else None

    def __getitem__(self, key: str) -> np.ndarray:
        record = self._record()
        if record is None or key not in record:
            raise KeyError(key)
        return record[key].numpy()

    def __setitem__(self, key: str, value: np.ndarray) -> None:
        self._record(create=True)[key] = Array(np.ascontiguousarray(value))

    def __delitem__(self, key: str) -> None:
        del self._record()[key]

    def __iter__(self):
        record = self._record()
        return iter(list(record.keys()) if record is not None else [])

    def __len__(self) -> int:
        record = self._record()
        return 0 if record is None else len(record)


def state_dir(cfg: Config, context: Context) -> Path:
    """The node config's client-state-dir (a SuperNode's folder, which serves run after run: one subfolder per
    run, so a run never starts from another run's vectors; a restarted SuperNode keeps the run id and finds its
    own), else the run config's, else a per-run temp folder."""
    node_dir = context.node_config.get("client-state-dir")
    if node_dir:
        return Path(str(node_dir)).expanduser() / f"run-{context.run_id}"
    configured = cfg["client-state-dir"]
    if configured:
        return Path(str(configured)).expanduser()
    return Path(tempfile.gettempdir()) / "fedsuite-client-state" / f"run-{context.run_id}"


def node_from_context(context: Context) -> ClientNode:
    nc = context.node_config
    if "partition-id" not in nc or "num-partitions" not in nc:
        raise KeyError("node config needs partition-id and num-partitions (SuperNode --node-config)")
    cfg = resolve(context.run_config)
    pid = int(nc["partition-id"])
    data_dir = str(nc["data-dir"]) if nc.get("data-dir") else None
    node = ClientNode(cfg, pid, int(nc["num-partitions"]), data_dir)
    vectors = registry.ALGORITHMS[str(cfg["algorithm"])].client_state_vectors(cfg)
    if vectors:
        where = choose_backend(
            str(cfg["client-state"]),
            int(cfg["num-clients"]),
            node.model.dim,
            vectors,
            float(cfg["client-state-budget-mb"]),
        )
        node.store = ContextStateStore(context) if where == "memory" else DiskStore(state_dir(cfg, context), pid)
    return node


def client_fn(context: Context):
    node = node_from_context(context)
    return registry.build_client(node.cfg, node).to_client()


app = ClientApp(client_fn=client_fn)
