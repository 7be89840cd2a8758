"""Run a federation in this process, through the same ClientApp `client_fn`, Strategy and NumPyClient
objects and Flower's own `Server` round loop that `flwr run` uses, minus Ray and messaging. For tests and
debugging. Each node keeps its Flower `Context` (and so its Context.state) across rounds, as Flower does.

Clients run one after the other (Flower's thread pool with one worker), so a run is deterministic, and a client
lost to the machinery (an exception outside the client's own fit, which clients/base.py turns into an error
reply) raises LostClient: a test never passes on a silently smaller cohort.
"""

from __future__ import annotations

from collections.abc import Mapping

from flwr.app import RecordDict
from flwr.common import Code, Context, GetPropertiesRes, Status
from flwr.server.client_proxy import ClientProxy

from fedsuite import registry
from fedsuite.client_app import client_fn
from fedsuite.config import resolve
from fedsuite.server_app import RecordingServer, build_plan


class LostClient(RuntimeError):
    """A client's message failed outside its fit (in a real run: a transport or worker failure)."""


class InProcessProxy(ClientProxy):
    def __init__(self, cid: str, context: Context):
        super().__init__(cid)
        self.context = context

    def get_properties(self, ins, timeout, group_id):
        return client_fn(self.context).get_properties(ins)

    def get_parameters(self, ins, timeout, group_id):
        return client_fn(self.context).get_parameters(ins)

    def fit(self, ins, timeout, group_id):
        return client_fn(self.context).fit(ins)

    def evaluate(self, ins, timeout, group_id):
        return client_fn(self.context).evaluate(ins)

    def reconnect(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {})


def node_contexts(run_config: Mapping, num_clients: int, run_id: int = 0) -> list[Context]:
    return [
        Context(run_id, pid, {"partition-id": pid, "num-partitions": num_clients}, RecordDict(), dict(run_config))
        for pid in range(num_clients)
    ]


def run_inprocess(run_config: Mapping, record: bool = False, on_strategy=None, contexts: list[Context] | None = None):
    """Train with `run_config` (defaults filled in); returns the strategy, whose `x` is the final model.
    `on_strategy(strategy)` is called before the first round (tests use it to observe replies); pass
    `contexts` (from `node_contexts`) to inspect the nodes' Context.state afterwards."""
    cfg = resolve(run_config)
    strategy = registry.build_strategy(cfg, build_plan(cfg, record=record))
    if on_strategy is not None:
        on_strategy(strategy)
    server = RecordingServer(strategy, strategy.plan.recorder)
    server.set_max_workers(1)
    aggregate_fit = strategy.aggregate_fit

    def strict(server_round, results, failures):
        if failures:
            raise LostClient(f"round {server_round}: {len(failures)} client message(s) failed: {failures[0]!r}")
        return aggregate_fit(server_round, results, failures)

    strategy.aggregate_fit = strict
    for context in contexts or node_contexts(run_config, int(cfg["num-clients"])):
        server.client_manager().register(InProcessProxy(f"node-{context.node_id}", context))
    server.fit(num_rounds=int(cfg["num-server-rounds"]), timeout=None)
    return strategy
