"""The composition root (fedsuite/run/compose.py): every surface (the ServerApp's server_fn, the in-process engine, a
user's own Flower app through fedsuite.app) gets its round loop from the one root, always RoundLoop, with the fit
round the root's table documents for the run config and engine; and x⁰ (with the model's initial buffers) is made by
one function, so the server's and a client node's are bit for bit the same."""

from __future__ import annotations

import pytest
import torch
from flwr.app import RecordDict
from flwr.common import Context
from flwr.server import Server
from torch import nn

from fedsuite import app as fedsuite_app
from fedsuite.batched.server import BatchedRound, SharedRound
from fedsuite.config.run_config import resolve
from fedsuite.data import server_dataset, with_data_clients
from fedsuite.models import networks
from fedsuite.models.networks import float_buffers, seeded_model, trainable
from fedsuite.node.holdings import ClientNode
from fedsuite.run import compose
from fedsuite.run.compose import Engine, compose_run
from fedsuite.run.inprocess import run_inprocess
from fedsuite.run.secagg_arithmetic import SecureSumRound
from fedsuite.server import app as server_app
from fedsuite.server.app import build_plan, initial_model, initial_state
from fedsuite.server.loop import FitRound, RoundLoop
from fedsuite.server.secure import SecAggPlusRound

LSQ = {"dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 4, "num-server-rounds": 1,
       "local-steps": 2, "batch-size": 10, "lr": 0.02}  # fmt: skip
CONFIGS = {
    "plain": LSQ,
    "batched": {**LSQ, "batch-clients": True},
    "secagg": {**LSQ, "secagg": True, "client-mapping": "fixed"},
    "sharing": {**LSQ, "batch-clients": True, "batch-messages": 2},
    "batched, kept apart": {**LSQ, "batch-clients": True, "client-mapping": "fixed"},  # one client per node
}
FLOWER, IN_PROCESS, IN_PROCESS_MESSAGES = "flower", "in process", "in process, messages"
# the fit round the root documents (fedsuite/run/compose.py) for each config and engine
EXPECTED = {
    "plain": {FLOWER: FitRound, IN_PROCESS: FitRound, IN_PROCESS_MESSAGES: FitRound},
    "batched": {FLOWER: SharedRound, IN_PROCESS: BatchedRound, IN_PROCESS_MESSAGES: SharedRound},
    "secagg": {FLOWER: SecAggPlusRound, IN_PROCESS: SecureSumRound, IN_PROCESS_MESSAGES: SecureSumRound},
    "sharing": {FLOWER: SharedRound, IN_PROCESS: BatchedRound, IN_PROCESS_MESSAGES: SharedRound},
    "batched, kept apart": {FLOWER: FitRound, IN_PROCESS: BatchedRound, IN_PROCESS_MESSAGES: FitRound},
}


def _context(run_config: dict) -> Context:
    return Context(7, 0, {}, RecordDict(), dict(run_config))


def _engine(kind: str, run_config: dict) -> Engine:
    if kind == FLOWER:
        return Engine(context=_context(run_config))
    return Engine.local(messages=kind == IN_PROCESS_MESSAGES)


@pytest.fixture
def chosen(monkeypatch):
    """Every fit round the root picks, with the engine it picked it for."""
    picked = []
    real = compose.fit_round_for

    def spy(cfg, plan, engine):
        picked.append((engine, real(cfg, plan, engine)))
        return picked[-1][1]

    monkeypatch.setattr(compose, "fit_round_for", spy)
    monkeypatch.setattr(server_app, "watch_flower_exit", lambda recorder: None)  # no exit handler in this process
    monkeypatch.setattr(server_app, "quiet_flower_logs", lambda: None)  # leave the log levels of other tests alone
    return picked


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("kind", [FLOWER, IN_PROCESS, IN_PROCESS_MESSAGES])
def test_the_root_picks_the_documented_round_loop(name, kind):
    cfg = with_data_clients(resolve(CONFIGS[name]))
    run = compose_run(cfg, build_plan(cfg, record=False), _engine(kind, CONFIGS[name]))
    assert type(run.loop) is RoundLoop
    assert type(run.loop.round_policy) is EXPECTED[name][kind]
    assert run.rule is run.strategy.rule and run.stages is run.strategy.stages
    assert run.x0.tobytes() == initial_model(cfg, server_dataset(cfg)).tobytes()
    assert run.client_state.dim == run.x0.size


@pytest.mark.parametrize("name", CONFIGS)
def test_the_server_app_and_the_inprocess_engine_get_their_loop_from_the_root(name, chosen, tmp_path):
    run_config = {**CONFIGS[name], "out-dir": str(tmp_path), "run-name": name.replace(" ", "-").replace(",", "")}
    served = server_app.server_fn(_context(run_config)).server
    run_inprocess(CONFIGS[name], messages=True)
    (flower, served_round), (local, local_round) = chosen
    assert not flower.in_process and local.in_process
    assert type(served) is RoundLoop and served.round_policy is served_round
    assert type(served_round) is EXPECTED[name][FLOWER] and type(local_round) is EXPECTED[name][IN_PROCESS_MESSAGES]
    if name != "secagg":  # in process, SecAgg+'s arithmetic stands for its protocol (fedsuite/run/secagg_arithmetic.py)
        assert type(served_round) is type(local_round)


def test_a_users_flower_app_gets_its_loop_from_the_root(chosen):
    strategy = fedsuite_app.strategy("fedavg", nn.Linear(3, 1), num_clients=2, clients_per_round=2)
    server = fedsuite_app.server_components(strategy).server
    assert type(server) is RoundLoop and [type(policy) for _, policy in chosen] == [FitRound]
    assert server.round_policy is chosen[0][1] and server.strategy is strategy


def test_round_loop_is_the_only_flower_server_subclass():
    def subclasses(cls):
        return {cls, *(c for sub in cls.__subclasses__() for c in subclasses(sub))}

    ours = {cls for cls in subclasses(Server) if cls.__module__.startswith("fedsuite")}
    assert ours == {RoundLoop}


# ---- x⁰, made once ---------------------------------------------------------------------------------------------
@pytest.fixture
def fresh_starts(monkeypatch):
    """Each x⁰ built anew: no copy shared between the server's and a client's reading."""
    monkeypatch.setattr(networks, "_STARTS", {})
    return networks._STARTS


def _as_before(module: nn.Module) -> tuple[bytes, bytes]:
    """x⁰ and the buffers as they were taken from the model before the one function (flat, float32)."""
    x0 = torch.cat([p.detach().reshape(-1) for p in trainable(module)]).float().numpy()
    owned = [b.detach().float().reshape(-1) for _, _, b in float_buffers(module)]
    return x0.tobytes(), (torch.cat(owned) if owned else torch.zeros(0)).numpy().tobytes()


@pytest.mark.parametrize("model", ["cnn", "2nn", "logreg", "tests.test_composition_root:mlp_with_batch_norm"])
@pytest.mark.parametrize("seed", [0, 3, 11])
def test_the_servers_and_a_client_nodes_x0_are_bit_identical(model, seed, fresh_starts):
    cfg = with_data_clients(resolve({"server-data": False, "evaluation": "federated", "input-shape": "3, 8, 8",
                                     "num-classes": 4, "model": model, "seed": seed, "num-clients": 3,
                                     "clients-per-round": 2}))  # fmt: skip
    shapes = server_dataset(cfg)
    x0, buffers = initial_model(cfg, shapes), initial_state(cfg, shapes)[1]
    fresh_starts.clear()  # the client builds its own
    node = ClientNode(cfg, 2, 3)
    assert x0.tobytes() == node.initial_x().numpy().tobytes()
    assert buffers.tobytes() == node.initial_buffers().numpy().tobytes()
    built = seeded_model(cfg.model, shapes.input_shape, shapes.num_classes, shapes.task, seed, cfg.model_args)
    assert (x0.tobytes(), buffers.tobytes()) == _as_before(built)
    first, second = node.initial_x(), node.initial_x()
    assert first.data_ptr() != second.data_ptr()  # a fresh copy each call: FedADMM's x̂_i is written in place


def mlp_with_batch_norm(input_shape: tuple[int, ...], num_classes: int, task: str = "classification") -> nn.Module:
    features = input_shape[0] * input_shape[1] * input_shape[2]
    return nn.Sequential(nn.Flatten(), nn.Linear(features, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, num_classes))


@pytest.mark.parametrize("seed", [0, 5])
def test_a_users_app_server_and_client_start_from_one_x0(seed, tmp_path):
    def user_model() -> nn.Module:
        torch.manual_seed(seed)  # the user builds the same model on the server and on every client
        return mlp_with_batch_norm((1, 2, 3), 3)

    settings = dict(num_clients=2, clients_per_round=2)
    strategy = fedsuite_app.strategy("fedadmm", user_model(), **settings)
    data = (torch.randn(6, 1, 2, 3), torch.tensor([0, 1, 2, 0, 1, 2]))
    node = fedsuite_app.client("fedadmm", user_model(), data, partition_id=0, num_partitions=2, state_dir=tmp_path,
                               **settings).node  # fmt: skip
    plan = strategy.plan
    assert plan.initial_x.tobytes() == node.initial_x().numpy().tobytes()
    assert plan.initial_buffers.tobytes() == node.initial_buffers().numpy().tobytes() and plan.has_buffers
    assert (plan.initial_x.tobytes(), plan.initial_buffers.tobytes()) == _as_before(user_model())
