"""An in-process federation whose nodes have node configs of the test's choosing (an allow-list, a data-dir of
their own), run through the same client_fn, Strategy and Flower Server as fedsuite.inprocess."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flwr.app import RecordDict
from flwr.common import Context

from fedsuite.config import resolve
from fedsuite.inprocess import InProcessProxy
from fedsuite.server.loop import RecordingServer
from fedsuite.server.observers import RoundObserver
from fedsuite.server_app import build_plan, build_strategy

RUN_ID = 7


def node_context(run_config: Mapping, node_config: Mapping, node_id: int = 0) -> Context:
    return Context(RUN_ID, node_id, dict(node_config), RecordDict(), dict(run_config))


def run_with_nodes(run_config: Mapping, node_configs: Sequence[Mapping], record: bool = False,
                   observers: Sequence[RoundObserver] = ()):  # fmt: skip
    """Train `run_config` on one node per entry of `node_configs`; returns the strategy."""
    cfg = resolve(run_config)
    plan = build_plan(cfg, record=record, run_id=RUN_ID)
    plan.query_workers = 1
    strategy = build_strategy(cfg, plan, list(observers))
    server = RecordingServer(strategy, plan.recorder, remove_client_state=True)
    server.set_max_workers(1)
    for nid, node_config in enumerate(node_configs):
        server.client_manager().register(InProcessProxy(str(nid), node_context(run_config, node_config, nid)))
    server.fit(num_rounds=cfg.run_control.num_rounds, timeout=None)
    return strategy
