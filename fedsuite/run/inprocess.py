"""Run a federation in this process, through the same ClientApp `client_fn`, Strategy and NumPyClient
objects and Flower's own `Server` round loop that `flwr run` uses, minus Ray and messaging (a NumPyClient's arrays
are encoded and decoded as Flower's wrapper does it, in fewer copies: fedsuite/server/direct_calls.py). For tests and
debugging. As in a simulation, a few nodes (2 by default, Flower's default federation) carry the cohort's
messages, each naming its partition; with client-mapping='fixed' there is one node per partition. Client state is
in the run's per-partition files (`client_store` reads them); `keep_client_state` keeps a per-run folder after the
run for inspection (the caller removes it, e.g. with `remove_client_state`).

Clients run one after the other (Flower's thread pool with one worker), or with batch-clients=true as stacked
groups (fedsuite/batched/), so a run is deterministic, and a client
lost to the machinery (an exception outside the client's own fit, which fedsuite/node/client.py turns into an
error reply) raises LostClient: a test never passes on a silently smaller cohort. Tests and studies watch a run
through round observers (fedsuite.server.observers), never by replacing strategy methods.

With secagg=true the rounds run SecAgg+'s arithmetic without its protocol (`SecureSumServer`): each client's
upload is weighted, clipped and quantised with the rounding draws its SuperNode's secaggplus_mod would use, the
integers are summed modulo 2**32 and the cohort's mean taken back out (fedsuite.privacy.secagg), so the final model
is the one a `flwr run` with SecAgg+ ends with, byte for byte.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from flwr.app import RecordDict
from flwr.common import Code, Context, GetPropertiesRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_proxy import ClientProxy

from fedsuite.batched.notice import say_unbatched
from fedsuite.batched.server import BatchedServer, SharingServer
from fedsuite.config.run_config import resolve
from fedsuite.data import with_data_clients
from fedsuite.node.app import client_fn, noise_secret
from fedsuite.privacy.secagg import SecAggSettings, quantize_upload, rounding_seed, secure_mean
from fedsuite.server import direct_calls
from fedsuite.server.adapter import RuleStrategy
from fedsuite.server.app import build_plan, build_strategy
from fedsuite.server.loop import RecordingServer
from fedsuite.server.observers import RoundObserver
from fedsuite.server.secure import SecureAggregationHalted
from fedsuite.state.store import DiskStore


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


class SecureSumServer(RecordingServer):
    """The round loop with SecAgg+'s arithmetic in place of its protocol (secagg=true, module docstring): the
    strategy gets what Flower's SecAggPlusWorkflow would hand it, every FitRes holding the cohort's mean. A round
    with fewer replies than the reconstruction threshold (or than two) is given up as the workflow gives it up."""

    def __init__(self, strategy, recorder, settings: SecAggSettings, seed: int, remove_client_state: bool = True):
        super().__init__(strategy, recorder, remove_client_state)
        self.settings, self.seed = settings, seed

    def fit_round(self, server_round: int, timeout: float | None):
        strategy = self.strategy
        instructions = strategy.configure_fit(server_round, self.parameters, self.client_manager())
        if not instructions:
            return None
        results, failures, quantized = [], [], []
        saved = np.random.get_state()  # a client seeds NumPy's generator for its rounding draws
        try:
            for proxy, ins in instructions if len(instructions) >= 2 else ():
                try:
                    res = proxy.fit(ins, timeout, str(server_round))
                except Exception as err:  # a refused upload (fedsuite.privacy.secagg_client): dropped from the sum
                    failures.append(err)
                    continue
                secret = noise_secret(proxy.context.node_config)
                seed = rounding_seed(self.seed, server_round, int(res.metrics["partition-id"]), secret)
                quantized.append(quantize_upload(parameters_to_ndarrays(res.parameters), res.num_examples,
                                                 self.settings, seed))  # fmt: skip
                results.append((proxy, res))
        finally:
            np.random.set_state(saved)
        needed = max(2, self.settings.reconstruction_threshold(len(instructions)))
        if len(results) < needed:
            halted = SecureAggregationHalted(f"{len(results)} of {len(instructions)} clients left, {needed} needed")
            strategy.aggregate_fit(server_round, [], [*failures, halted])
            return None
        mean = ndarrays_to_parameters(secure_mean(quantized, self.settings))
        for _, res in results:
            res.parameters = mean
        parameters, metrics = strategy.aggregate_fit(server_round, results, failures)
        return parameters, metrics, (results, failures)


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


def client_store(strategy, partition_id: int) -> DiskStore:
    """A fresh view of one partition's client-state file of the run `strategy` belongs to."""
    return DiskStore(strategy.plan.client_state_root, partition_id)


def remove_client_state(strategy) -> None:
    if strategy.plan.client_state_root is not None:
        shutil.rmtree(strategy.plan.client_state_root, ignore_errors=True)


def run_inprocess(run_config: Mapping, record: bool = False, observers: Iterable[RoundObserver] = (),
                  num_nodes: int = 2, keep_client_state: bool = False, run_id: int | None = None,
                  node_configs: Sequence[Mapping] | None = None, messages: bool = False) -> RuleStrategy:  # fmt: skip
    """Train with `run_config` (defaults filled in); returns the strategy (`strategy.rule` is the algorithm's
    server rule, `strategy.x` the final model). `observers` watch every round (fedsuite.server.observers).
    `node_configs`: one node per entry with that node config (e.g. partition-id, num-partitions and a data-dir of
    the node's own), instead of `num_nodes` simulation-style nodes. `messages`: with batch-clients=true, send each
    node's share of a round in one message through the ClientApp, as `flwr run` does (fedsuite/batched/shares.py),
    instead of handing the round's clients to the batched dispatcher directly."""
    cfg = with_data_clients(resolve(run_config))
    run_id = new_run_id() if run_id is None else run_id
    plan = build_plan(cfg, record=record, run_id=run_id)
    plan.query_workers = 1  # every exchange one client at a time: deterministic, no lost replies
    if not messages:  # the dispatcher takes the whole round: no node carries a block of it
        plan.shares = 0
    strategy = build_strategy(cfg, plan, [Strict(), *observers])
    secagg = cfg.secagg
    if secagg.on:
        say_unbatched(cfg, "secagg=true sums each client's upload as it arrives")
        server = SecureSumServer(strategy, plan.recorder, secagg, cfg.seed, remove_client_state=not keep_client_state)
    elif cfg.batching.clients and messages:  # each node's share of a round in one message, as under flwr run
        server = SharingServer(strategy, plan.recorder, remove_client_state=not keep_client_state)
    elif cfg.batching.clients:  # a round's clients trained as stacked groups (docs/running/batched.md)
        server = BatchedServer(strategy, plan.recorder, remove_client_state=not keep_client_state)
    else:
        server = RecordingServer(strategy, plan.recorder, remove_client_state=not keep_client_state)
    server.set_max_workers(1)
    if cfg.run_control.client_mapping == "fixed":
        num_nodes = cfg.num_clients
    for context in node_contexts(run_config, num_nodes, run_id, node_configs):
        server.client_manager().register(InProcessProxy(str(context.node_id), context))
    server.fit(num_rounds=cfg.run_control.num_rounds, timeout=None)
    return strategy
