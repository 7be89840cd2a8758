"""Run a federation in this process, through the same Strategy and NumPyClient objects and Flower's own
`Server` round loop that `flwr run` uses, minus Ray and messaging. For tests and debugging.

Each message builds a fresh client from its node (as Flower's client_fn does), so nothing can persist
in client objects between rounds by accident.
"""

from __future__ import annotations

from collections.abc import Mapping

from flwr.common import Code, GetPropertiesRes, Status
from flwr.server import Server
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy

from fedsuite import registry
from fedsuite.config import resolve
from fedsuite.node import ClientNode
from fedsuite.server_app import build_plan


class InProcessProxy(ClientProxy):
    def __init__(self, cid: str, node: ClientNode):
        super().__init__(cid)
        self.node = node

    def _client(self):
        return registry.build_client(self.node.cfg, self.node).to_client()

    def get_properties(self, ins, timeout, group_id):
        return self._client().get_properties(ins)

    def get_parameters(self, ins, timeout, group_id):
        return self._client().get_parameters(ins)

    def fit(self, ins, timeout, group_id):
        return self._client().fit(ins)

    def evaluate(self, ins, timeout, group_id):
        return self._client().evaluate(ins)

    def reconnect(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {})


def run_inprocess(run_config: Mapping, record: bool = False, on_strategy=None):
    """Train with `run_config` (defaults filled in); returns the strategy, whose `x` is the final model.
    `on_strategy(strategy)` is called before the first round (tests use it to observe replies)."""
    cfg = resolve(run_config)
    strategy = registry.build_strategy(cfg, build_plan(cfg, record=record))
    if on_strategy is not None:
        on_strategy(strategy)
    manager = SimpleClientManager()
    for pid in range(int(cfg["num-clients"])):
        manager.register(InProcessProxy(f"node-{pid}", ClientNode(cfg, pid, int(cfg["num-clients"]))))
    server = Server(client_manager=manager, strategy=strategy)
    server.fit(num_rounds=int(cfg["num-server-rounds"]), timeout=None)
    return strategy
