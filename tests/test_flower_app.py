"""fedsuite.app, the surface for a user's own Flower app: it runs the suite's real algorithms (bit for bit the suite's
own run of the same algorithm, model and data), refuses bad input in one line, and the example app in
examples/flower_app runs under `flwr run` (Ray simulation)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import RecordDict
from flwr.common import Code, Context, GetPropertiesRes, Status
from flwr.server import Server
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fedsuite import app as fedsuite_app
from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve, toml_value
from fedsuite.data import client_partition, load_dataset
from fedsuite.registry import costs
from fedsuite.registry import known as registry
from fedsuite.run.inprocess import Strict, node_contexts, run_inprocess
from fedsuite.server.buffers import AveragedBuffers
from fedsuite.server.guard import RunAborted
from simulation.launcher import flower as sim
from simulation.launcher.processes import new_token, stop_tagged, tagged_processes
from tests.conftest import SESSION

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flower_app"
SURFACE_KEYS = ("num-clients", "clients-per-round", "batch-size", "local-steps", "lr", "weight-decay",
                "num-server-rounds")  # fmt: skip


class Node(ClientProxy):
    """One SuperNode in process: every message builds the user's Flower Client anew, as Flower calls client_fn."""

    def __init__(self, cid: str, make_client):
        super().__init__(cid)
        self.make_client = make_client

    def get_properties(self, ins, timeout, group_id):
        return self.make_client().get_properties(ins)

    def get_parameters(self, ins, timeout, group_id):
        return self.make_client().get_parameters(ins)

    def fit(self, ins, timeout, group_id):
        return self.make_client().fit(ins)

    def evaluate(self, ins, timeout, group_id):
        return self.make_client().evaluate(ins)

    def reconnect(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {})


def linear_regressor(input_shape: tuple[int, ...]) -> nn.Module:
    return nn.Linear(input_shape[0], 1, bias=False)


def bn_regressor(input_shape: tuple[int, ...]) -> nn.Module:
    """A model with BatchNorm statistics (float buffers), importable by the suite as model='tests.…:bn_regressor'
    (no affine BatchNorm parameters: the synthetic federation's evaluator reads x as the linear weights)."""
    return nn.Sequential(nn.BatchNorm1d(input_shape[0], affine=False), nn.Linear(input_shape[0], 1, bias=False))


def user_model(dim: int, factory=linear_regressor) -> nn.Module:
    torch.manual_seed(0)  # the user builds the same model on the server and on every client
    return factory((dim,))


def half_squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * F.mse_loss(out.squeeze(-1), y)


def user_federation(run_config: dict):
    """The kit's least-squares federation as a user holds it: per partition a shuffling DataLoader of tensors."""
    cfg = resolve(run_config)
    ds = load_dataset(cfg)
    loaders = []
    for part in client_partition(cfg, ds):
        idx = torch.as_tensor(part, dtype=torch.long)
        loaders.append(DataLoader(TensorDataset(ds.train.x[idx], ds.train.y[idx]), batch_size=7, shuffle=True))
    return cfg, loaders


def run_surface(algorithm: str, run_config: dict, state_dir: Path, client_settings: dict | None = None,
                factory=linear_regressor, flower_server: bool = False, test_data: dict | None = None,
                **strategy_options):  # fmt: skip
    """A user's federation through fedsuite.app, in process: strategy + one client per partition, Flower's loop.
    The settings are the run config's SURFACE_KEYS and any further key it has beside the kit's federation."""
    cfg, loaders = user_federation(run_config)
    keys = [*SURFACE_KEYS, *(set(run_config) - set(kit.PARTIAL) - {"algorithm", "model"})]
    settings = {key.replace("-", "_"): cfg[key] for key in keys}
    dim = int(cfg["synthetic-dim"])
    strategy = fedsuite_app.strategy(algorithm, user_model(dim, factory), observers=(Strict(),), **strategy_options,
                                     **settings)  # fmt: skip
    if flower_server:  # the plain Flower Server a user may build: ServerAppComponents(strategy=strategy, ...)
        server = Server(client_manager=SimpleClientManager(), strategy=strategy)
    else:
        server = fedsuite_app.server_components(strategy).server
    server.set_max_workers(1)
    n = cfg.num_clients

    def maker(pid: int):
        def make():
            return fedsuite_app.client(algorithm, user_model(dim, factory), loaders[pid], partition_id=pid,
                                       num_partitions=n, state_dir=state_dir, loss_fn=half_squared_error,
                                       test=(test_data or {}).get(pid),
                                       **{**settings, **(client_settings or {})}).to_client()  # fmt: skip

        return make

    for pid in range(n):
        server.client_manager().register(Node(str(100 + pid), maker(pid)))
    server.fit(num_rounds=int(cfg["num-server-rounds"]), timeout=None)
    return strategy


@pytest.fixture
def fedavgm_plugin(monkeypatch):
    """The example plug-in algorithm (examples/fedavgm) registered in this process for the test."""
    monkeypatch.syspath_prepend(str(EXAMPLE.parent / "fedavgm"))
    from fedavgm_plugin import algorithm

    installed = "fedavgm-nesterov" in registry.ALGORITHMS  # through its entry point, when the example is installed
    registry.register(algorithm())
    yield
    if not installed:
        registry.ALGORITHMS.unregister("fedavgm-nesterov")


CASES = {
    "scaffold": ("scaffold", {}, linear_regressor),
    "fedspeed": ("fedspeed", {}, linear_regressor),
    "fedadmm": ("fedadmm", {}, linear_regressor),  # x̂_i starts at the user's x^0
    "fedavg-batchnorm-averaged": ("fedavg", {"model": "tests.test_flower_app:bn_regressor"}, bn_regressor),
    "scaffold-batchnorm-local": ("scaffold", {"model": "tests.test_flower_app:bn_regressor", "buffers": "local"},
                                 bn_regressor),
    "plug-in-fedavgm-nesterov": ("fedavgm-nesterov", {"fedavgm-nesterov-beta": 0.5}, linear_regressor),
    "mimesvrg": ("mimesvrg", {}, linear_regressor),  # a query exchange before each round's training
    "losac": ("losac", {"losac-blocks": 3}, linear_regressor),  # fixed data blocks per client
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_the_surface_runs_the_suites_algorithm_bit_for_bit(case, tmp_path, request):
    """Partial participation, minibatches, weight decay, client state over rounds: the user's module, loaders and
    loss through fedsuite.app give the very model of the suite's own run (SCAFFOLD's c_i, FedSpeed's duals,
    FedADMM's x̂_i and per-client BatchNorm statistics all live in the user's state folder), for a plug-in too."""
    algorithm, extra, factory = CASES[case]
    if algorithm == "fedavgm-nesterov":
        request.getfixturevalue("fedavgm_plugin")
    run_config = {**kit.PARTIAL, **extra, "algorithm": algorithm}
    suite = run_inprocess(run_config)
    surface = run_surface(algorithm, run_config, tmp_path / "state", factory=factory)
    assert kit.identical(surface.x, suite.x), np.max(np.abs(surface.x - suite.x))
    assert suite.rule.state_dict().keys() == surface.rule.state_dict().keys()
    for name, value in suite.rule.state_dict().items():
        assert kit.identical(np.asarray(surface.rule.state_dict()[name]), np.asarray(value)), name
    if (averaged := suite.stage(AveragedBuffers)) is not None:
        assert kit.identical(surface.stage(AveragedBuffers).vector, averaged.vector)
    stateful = costs.client_state(algorithm) or extra.get("buffers") == "local"
    assert len(list((tmp_path / "state").glob("partition-*.state"))) == (run_config["num-clients"] if stateful else 0)


def test_scaffold_through_the_surface_reaches_the_federations_optimum(tmp_path):
    run_config = {**kit.LSQ, "algorithm": "scaffold", "num-server-rounds": 30}
    strategy = run_surface("scaffold", run_config, tmp_path)
    assert kit.least_squares(run_config).relative_error(strategy.x) < 1e-3


@pytest.mark.parametrize("flower_server", [False, True], ids=["fedsuite-loop", "flower-server"])
def test_results_folder_and_central_evaluation(tmp_path, flower_server):
    run_config = {**kit.PARTIAL, "num-server-rounds": 3}
    cfg, loaders = user_federation(run_config)
    inputs, targets = loaders[0].dataset.tensors

    def evaluate(module):
        return {"loss": float(half_squared_error(module(inputs), targets)), "seen": float(module.training)}

    run_surface(
        "fedavg",
        run_config,
        tmp_path / "state",
        evaluate=evaluate,
        results=tmp_path / "run",
        flower_server=flower_server,
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert [row["round"] for row in rows] == [0, 1, 2, 3]
    assert rows[-1]["loss"] < rows[0]["loss"] and rows[-1]["seen"] == 0.0  # evaluated in eval mode
    assert rows[-1]["replies"] == cfg["clients-per-round"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("flower_server", [False, True], ids=["fedsuite-loop", "flower-server"])
def test_federated_evaluation_on_the_clients_test_data(tmp_path, flower_server):
    """evaluation='federated': the round's cohort evaluates the new model on its client(test=...) data; the row's
    fed_loss is their example-weighted mean, recomputed here from the final model."""
    run_config = {**kit.PARTIAL, "num-server-rounds": 3}
    cfg, loaders = user_federation(run_config)
    n = cfg.num_clients
    tests = {pid: loaders[(pid + 1) % n].dataset.tensors for pid in range(n)}  # another client's data, say
    strategy = run_surface("scaffold", run_config, tmp_path / "state", test_data=tests, evaluation="federated",
                           results=tmp_path / "run", flower_server=flower_server)  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert [row["round"] for row in rows] == [0, 1, 2, 3] and "fed_loss" not in rows[0]
    w = torch.as_tensor(strategy.x).reshape(1, -1)
    cohort = strategy.plan.sampler.cohort(3)
    losses = [(len(tests[p][1]), float(half_squared_error(tests[p][0] @ w.T, tests[p][1]))) for p in cohort]
    expected = sum(k * loss for k, loss in losses) / sum(k for k, _ in losses)
    assert rows[3]["fed_clients"] == len(cohort) and rows[3]["fed_loss"] == pytest.approx(expected, rel=1e-6)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["target_metric"] == "fed_accuracy"


def test_a_client_with_other_settings_is_refused_with_the_keys_named(tmp_path, caplog):
    run_config = {**kit.PARTIAL, "num-server-rounds": 1}
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"), pytest.raises(RunAborted):
        run_surface("scaffold", run_config, tmp_path, client_settings={"batch_size": 2})
    assert "configuration mismatch (batch-size: server 4, client 2)" in caplog.text


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: fedsuite_app.strategy("scaffold", m, num_clients=3, dataset="cifar10"), "dataset: not a fedsuite"),
        (lambda m: fedsuite_app.strategy("scaffold", m, num_clients=3, lr_rate=0.1), "lr-rate: unknown setting"),
        (lambda m: fedsuite_app.strategy("scaffold", m, num_clients=3, clients_per_round=2, lr=-1), "lr=-1.0: must"),
        (lambda m: fedsuite_app.strategy("scafold", m, num_clients=3), "algorithm='scafold': allowed values are"),
        (lambda m: fedsuite_app.strategy("scaffold", m), "num_clients: give the number of partitions"),
        (lambda m: fedsuite_app.strategy("fedavg", m, num_clients=3, clients_per_round=2, evaluation="federated",
                                         evaluate=lambda module: {}), "evaluate: evaluation='federated' runs no"),
        (lambda m: fedsuite_app.client("scaffold", m, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)),
                                       partition_id=0, num_partitions=2), "state_dir: algorithm='scaffold' keeps"),
        (lambda m: fedsuite_app.client("fedavg", m, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)),
                                       partition_id=2, num_partitions=2), "partition_id=2: must be in 0..1"),
        (lambda m: fedsuite_app.client("fedavg", m, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)),
                                       partition_id=0, num_partitions=2, device="gpu"), "device='gpu': allowed"),
        (lambda m: fedsuite_app.client("fedavg", m, [1, 2, 3], partition_id=0, num_partitions=2),
         "train: expected a DataLoader, a Dataset or a pair"),
        (lambda m: fedsuite_app.client("fedavg", m, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)),
                                       test=(torch.zeros(3, 3), torch.zeros(2)), partition_id=0, num_partitions=2),
         "test: 3 inputs and 2 targets"),
        (lambda m: fedsuite_app.client("fedavg", m, (torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)),
                                       partition_id=0, num_partitions=2, num_clients=3, clients_per_round=2),
         "num_clients=3: this client is one of num_partitions=2"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_argument(call, message):
    with pytest.raises((ConfigError, fedsuite_app.DataError)) as err:
        call(nn.Linear(3, 2))
    assert message in str(err.value), str(err.value)


def test_client_evaluates_on_its_test_data():
    torch.manual_seed(1)
    x, y = torch.randn(40, 3), torch.randint(0, 2, (40,))
    made = fedsuite_app.client("fedavg", nn.Linear(3, 2), (x, y), test=(x[:10], y[:10]), partition_id=0,
                               num_partitions=1)  # fmt: skip
    params = made.get_parameters({})
    loss, n, metrics = made.evaluate(params, {})
    with torch.no_grad():
        net = nn.Linear(3, 2)
        torch.nn.utils.vector_to_parameters(torch.as_tensor(params[0]), net.parameters())
        out = net(x[:10])
    assert n == 10 and loss == pytest.approx(float(F.cross_entropy(out, y[:10])), rel=1e-6)
    assert metrics["partition-id"] == 0
    assert metrics["accuracy"] == pytest.approx(float((out.argmax(1) == y[:10]).float().mean()))


# ---- the example app under `flwr run` (Ray simulation) -----------------------------------------------------------
def example_config(tmp_path: Path, overrides: dict) -> dict:
    """The example's run config (its pyproject table) with `overrides` and folders under tmp_path."""
    table = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    return {**table, **overrides, "results-dir": str(tmp_path / "results"), "state-dir": str(tmp_path / "state")}


def flwr_run_example(tmp_path: Path, overrides: dict, supernodes: int) -> tuple[dict, list[dict], str]:
    """`flwr run examples/flower_app --stream` with `supernodes` simulated SuperNodes; the run's summary and rows."""
    token, home, ray_dir = new_token(), tmp_path / "flwr-home", sim.private_ray_dir()
    config = example_config(tmp_path, overrides)
    tmp_path.mkdir(parents=True, exist_ok=True)
    cmd = [sim.flwr_executable(), "run", str(EXAMPLE), "--stream",
           "--federation-config", f"num-supernodes={supernodes} client-resources-num-cpus=1",
           "-c", " ".join(f"{key}={toml_value(value)}" for key, value in config.items())]  # fmt: skip
    try:
        proc = subprocess.run(cmd, env=sim.flower_env(token, home, ray_dir), cwd=tmp_path, capture_output=True,
                              text=True, timeout=500)  # fmt: skip
    finally:
        stop_tagged(token, private_dir=ray_dir)  # the detached local SuperLink and Ray
        if ray_dir is not None:
            shutil.rmtree(ray_dir, ignore_errors=True)
    assert not tagged_processes(token, env=SESSION)
    runs = sorted((tmp_path / "results").glob("*/summary.json"))
    assert len(runs) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (runs[0].parent / "rounds.jsonl").read_text().splitlines()]
    return json.loads(runs[0].read_text()), rows, proc.stdout + proc.stderr


def example_in_process(tmp_path: Path, overrides: dict, supernodes: int):
    """The example's own server_fn and client_fn, called in this process (no Ray): the strategy after the run."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from user_app.client_app import client_fn
        from user_app.server_app import server_fn
    finally:
        sys.path.remove(str(EXAMPLE))
    config = example_config(tmp_path, overrides)
    server = server_fn(Context(1, 0, {}, RecordDict(), config)).server
    server.set_max_workers(1)
    for context in node_contexts(config, supernodes, run_id=1):
        server.client_manager().register(Node(str(context.node_id), lambda c=context: client_fn(c)))
    server.fit(num_rounds=int(config["num-server-rounds"]), timeout=None)
    return server.strategy


def test_example_app_runs_scaffold_under_flwr_run(tmp_path):
    summary, rows, log = flwr_run_example(tmp_path, {"algorithm": "scaffold", "num-server-rounds": 2}, supernodes=3)
    assert summary["status"] == "completed", log[-3000:]
    assert [row["round"] for row in rows] == [0, 1, 2]
    assert rows[-1]["replies"] == rows[-1]["cohort"] == 3 and rows[-1]["accuracy"] > rows[0]["accuracy"]
    assert rows[-1]["fed_clients"] == 3 and 0.0 < rows[-1]["fed_accuracy"] <= 1.0  # each on its own test loader
    assert len(list((tmp_path / "state").rglob("partition-*.state"))) == 3  # c_i of every SuperNode's partition


@pytest.mark.slow
def test_example_app_under_flwr_run_equals_its_in_process_run(tmp_path):
    """FedSpeed, 4 SuperNodes, 3 a round, 5 rounds: partitions repeat, so lost client state would show."""
    overrides = {"algorithm": "fedspeed", "num-clients": 4, "num-server-rounds": 5}
    summary, rows, log = flwr_run_example(tmp_path / "ray", overrides, supernodes=4)
    assert summary["status"] == "completed", log[-3000:]
    assert rows[-1]["replies"] == 3 and rows[-1]["accuracy"] > rows[0]["accuracy"] + 0.3
    strategy = example_in_process(tmp_path / "local", overrides, supernodes=4)
    local = [json.loads(line) for line in next((tmp_path / "local").rglob("rounds.jsonl")).read_text().splitlines()]
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in local], rel=1e-6)
    assert [r.get("fed_loss") for r in rows[1:]] == pytest.approx([r.get("fed_loss") for r in local[1:]], rel=1e-6)
    assert strategy.plan.algorithm == "fedspeed"


def test_a_loader_with_a_sampler_gives_the_rows_it_samples_only():
    """A partition chosen by a sampler over a shared dataset is that partition, not the whole dataset."""
    from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

    from fedsuite.app.node import _tensors

    full = TensorDataset(torch.arange(100.0).reshape(100, 1), torch.arange(100) % 3)
    picked = [7, 3, 50, 21]
    loader = DataLoader(full, batch_size=2, sampler=SubsetRandomSampler(picked))
    inputs, targets = _tensors(loader, "train")
    assert inputs.reshape(-1).tolist() == [3.0, 7.0, 21.0, 50.0] and targets.tolist() == [0, 1, 0, 2]
    plain, _ = _tensors(DataLoader(full, batch_size=8, shuffle=True), "train")
    assert plain.reshape(-1).tolist() == list(map(float, range(100)))  # a plain loader: every row, in order


def test_client_settings_check_covers_every_local_loop_key():
    from fedsuite.app.settings import _CLIENT_READS
    from fedsuite.config.run_config import LocalLoop

    # lr and each client's K_i under unequal work (local-work, local-steps-min) come in the fit config
    assert set(LocalLoop.keys().values()) - set(_CLIENT_READS) == {
        "lr", "lr-decay", "client-threads", "local-work", "local-steps-min"
    }  # fmt: skip
