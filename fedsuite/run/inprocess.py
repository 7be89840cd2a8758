"""Run a federation in this process, through the same ClientApp `client_fn`, Strategy and NumPyClient
objects and Flower's own `Server` round loop that `flwr run` uses, minus Ray and messaging (a NumPyClient's arrays
are encoded and decoded as Flower's wrapper does it, in fewer copies: fedsuite/server/direct_calls.py). For tests and
debugging. As in a simulation, a few nodes (2 by default, Flower's default federation) carry the cohort's
messages, each naming its partition; with client-mapping='fixed' there is one node per partition. Client state is
kept as the run's client-state plan says (fedsuite/state/plan.py): memory state of a run that writes no checkpoint
stays in this process (the memory tier), anything else in the run's per-partition files; `client_store` reads
either. `keep_client_state` keeps a per-run folder of files after the run for inspection (the caller removes it,
e.g. with `remove_client_state`).

Clients run one after the other (Flower's thread pool with one worker), or with batch-clients=true as stacked
groups (fedsuite/batched/), so a run is deterministic, and a client
lost to the machinery (an exception outside the client's own fit, which fedsuite/node/client.py turns into an
error reply) raises LostClient: a test never passes on a silently smaller cohort. Tests and studies watch a run
through round observers (fedsuite.server.observers), never by replacing strategy methods.

The run is put together by the composition root (fedsuite/run/compose.py) from the suite's plan
(fedsuite.server.app.build_plan), as the ServerApp's is: the same strategy, and the same round loop with the fit round
of this engine. With secagg=true the rounds run SecAgg+'s arithmetic without its protocol
(fedsuite/run/secagg_arithmetic.py), so the final model is the one a `flwr run` with SecAgg+ ends with, byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from flwr.app import RecordDict
from flwr.common import Code, Context, GetPropertiesRes, Status
from flwr.server.client_proxy import ClientProxy

from fedsuite.config.run_config import resolve
from fedsuite.data import with_data_clients
from fedsuite.node.app import ONE_PROCESS_RUNS, client_fn
from fedsuite.run.compose import Engine, compose_run
from fedsuite.server import direct_calls
from fedsuite.server.adapter import RuleStrategy
from fedsuite.server.app import build_plan
from fedsuite.server.observers import RoundObserver
from fedsuite.state import run_state
from fedsuite.state.tier import StateTier


class LostClient(RuntimeError):
    """A client's message failed outside its fit (in a real run: a transport or worker failure)."""


class Strict(RoundObserver):
    """Raises LostClient on any failure of a fit message: in process, nothing but a bug can lose one."""

    def failed(self, server_round: int, failures: list) -> None:
        if failures:
            raise LostClient(f"round {server_round}: {len(failures)} client message(s) failed: {failures[0]!r}")


class InProcessProxy(ClientProxy):
    def __init__(self, cid: str, context: Context):
        super().__init__(cid)
        self.context = context

    def get_properties(self, ins, timeout, group_id):
        return client_fn(self.context).get_properties(ins)

    def get_parameters(self, ins, timeout, group_id):
        return client_fn(self.context).get_parameters(ins)

    def fit(self, ins, timeout, group_id):
        return direct_calls.fit(client_fn(self.context), ins)

    def evaluate(self, ins, timeout, group_id):
        return direct_calls.evaluate(client_fn(self.context), ins)

    def reconnect(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {})


def node_contexts(run_config: Mapping, num_nodes: int, run_id: int = 0,
                  node_configs: Sequence[Mapping] | None = None) -> list[Context]:  # fmt: skip
    """Nodes as Flower's simulation makes them (node config partition-id 0..num_nodes-1), or one node per entry of
    `node_configs` with that node config (a deployment's --node-config: partition-id, num-partitions, data-dir)."""
    if node_configs is None:
        node_configs = [{"partition-id": nid, "num-partitions": num_nodes} for nid in range(num_nodes)]
    return [
        Context(run_id, nid, dict(node_config), RecordDict(), dict(run_config))
        for nid, node_config in enumerate(node_configs)
    ]


def new_run_id() -> int:
    """A fresh run id (per-run client-state folders are named after it)."""
    return random.SystemRandom().getrandbits(48)


def client_store(strategy, partition_id: int) -> StateTier:
    """A fresh view of one partition's client state of the run `strategy` belongs to, in the tier that holds it."""
    return run_state.reopen(strategy.plan.client_state_root, partition_id)


def remove_client_state(strategy) -> None:
    if strategy.plan.client_state_root is not None:
        run_state.remove(strategy.plan.client_state_root)


def run_inprocess(run_config: Mapping, record: bool = False, observers: Iterable[RoundObserver] = (),
                  num_nodes: int = 2, keep_client_state: bool = False, run_id: int | None = None,
                  node_configs: Sequence[Mapping] | None = None, messages: bool = False) -> RuleStrategy:  # fmt: skip
    """Train with `run_config` (defaults filled in); returns the strategy (`strategy.rule` is the algorithm's
    server rule, `strategy.x` the final model). `observers` watch every round (fedsuite.server.observers).
    `node_configs`: one node per entry with that node config (e.g. partition-id, num-partitions and a data-dir of
    the node's own), instead of `num_nodes` simulation-style nodes. `messages`: with batch-clients=true, reach the
    clients through the ClientApp's messages as `flwr run` does, each node's share of a round in one message
    (fedsuite/batched/shares.py; one message per client where something keeps the clients apart, as under `flwr run`,
    fedsuite.batched.notice.why_not_shared), instead of handing the round's clients to the batched dispatcher."""
    cfg = with_data_clients(resolve(run_config))
    run_id = new_run_id() if run_id is None else run_id
    engine = Engine.local(messages=messages, keep_client_state=keep_client_state)
    run = compose_run(cfg, build_plan(cfg, record=record, run_id=run_id), engine, [Strict(), *observers])
    loop = run.loop
    if cfg.run_control.client_mapping == "fixed":
        num_nodes = cfg.num_clients
    for context in node_contexts(run_config, num_nodes, run_id, node_configs):
        loop.client_manager().register(InProcessProxy(str(context.node_id), context))
    if not keep_client_state:  # kept state is read as files afterwards; else memory state may stay in the process
        ONE_PROCESS_RUNS.add(run_id)
    try:
        loop.fit(num_rounds=cfg.run_control.num_rounds, timeout=None)
    finally:
        ONE_PROCESS_RUNS.discard(run_id)
    return run.strategy
