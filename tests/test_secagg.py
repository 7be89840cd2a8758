"""Secure aggregation with Flower's SecAgg+ (docs/privacy-secagg.md): the refusals, the arithmetic and its bound,
what the server and its observers see, the client's gate and checks, and one real `flwr run` against the in-process
engine."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import Message
from flwr.app.message_type import MessageType
from flwr.client import ClientApp
from flwr.compat.common import recorddict_compat as compat

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import with_data_clients
from fedsuite.node.app import app as client_app
from fedsuite.node.app import client_fn
from fedsuite.privacy.secagg import SecAggSettings, quantize_upload, secure_mean
from fedsuite.privacy.secagg_client import SecureUploadRefused, secagg_mod, secure_reply
from fedsuite.results import checkpoint
from fedsuite.run.inprocess import InProcessProxy, node_contexts, run_inprocess
from fedsuite.run.secagg_arithmetic import SecureSumRound
from fedsuite.server.app import build_plan, build_strategy
from fedsuite.server.loop import FitRound, RoundLoop
from fedsuite.server.observers import RoundObserver
from fedsuite.server.secure_sum import SecureSum

LSQ = {"dataset": "synthetic-lsq", "num-clients": 4, "clients-per-round": 3, "num-server-rounds": 1,
       "local-steps": 5, "batch-size": 10, "lr": 0.02, "client-mapping": "fixed"}  # fmt: skip
SECURE = {**LSQ, "secagg": True}


# ---- bad input: one line each, before any training -----------------------------------------------------------
@pytest.mark.parametrize(
    "overrides,words",
    [
        ({"algorithm": "mimesvrg"}, "algorithm='mimesvrg' sends each client's full local gradient"),
        ({"algorithm": "fadamet"}, "algorithm='fadamet' uploads delta_y from the tracking subset only"),
        ({"algorithm": "fadamgt"}, "algorithm='fadamgt' uploads delta_y"),
        ({"algorithm": "feddyn", "dual-storage": "server"}, "secagg=true with dual-storage='server'"),
        ({"algorithm": "fedspeed", "dual-storage": "server"}, "secagg=true with dual-storage='server'"),
        ({"algorithm": "fedcm", "local-steps": 0, "local-epochs": 1}, "secagg=true with local-steps=0"),
        ({"algorithm": "fedlada", "local-steps": 0, "local-epochs": 1}, "secagg=true with local-steps=0"),
        ({"client-mapping": "logical"}, "secagg=true needs client-mapping='fixed'"),
        ({"weighting": "samples"}, "secagg=true needs weighting='uniform'"),
        ({"sampling": "bernoulli", "participation": 0.5}, "secagg=true needs sampling='fixed'"),
        ({"secagg-threshold": 4}, "secagg-threshold=4: more than clients-per-round=3"),
        ({"secagg-threshold": 1}, "secagg-threshold=1: must be 0"),
        ({"secagg-shares": 4, "num-clients": 6, "clients-per-round": 5}, "secagg-shares=4: must be 0"),
        ({"clients-per-round": 1}, "secagg=true needs clients-per-round >= 2"),
        ({"secagg-quantization": 2**31}, "secagg-quantization=2147483648: clients-per-round × levels"),
        ({"dp": "clients", "dp-clip-mode": "adaptive", "dp-count-noise": 1.0}, "dp-clip-mode='adaptive'"),
    ],
)
def test_configs_secagg_cannot_serve_are_refused_in_one_line(overrides, words):
    with pytest.raises(ConfigError) as err:
        resolve({**SECURE, **overrides})
    lines = [line for line in str(err.value).splitlines()[1:] if "secagg" in line]
    assert len(lines) == 1 and words in lines[0]


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "feddyn", "fedspeed", "fedadmm", "fedcm", "fedmim",
                                       "fedlada", "losac", "fedadam", "localadam"])  # fmt: skip
def test_algorithms_whose_server_needs_only_sums_are_accepted(algorithm):
    assert resolve({**SECURE, "algorithm": algorithm})["secagg"] is True


def test_a_bad_secagg_config_exits_2_before_training(capsys):
    from simulation.run import main

    assert main(["-c", "dataset='synthetic-lsq' secagg=true"]) == 2
    assert "client-mapping='fixed'" in capsys.readouterr().err


# ---- the arithmetic ------------------------------------------------------------------------------------------
def test_secure_mean_is_the_mean_within_one_level_and_reproducible():
    settings = SecAggSettings(on=True)
    rng = np.random.default_rng(0)
    uploads = [[rng.normal(0, 0.5, 1000).astype(np.float32), rng.normal(0, 0.1, 7).astype(np.float32)]
               for _ in range(5)]  # fmt: skip
    quantized = [quantize_upload(u, 1, settings, [1, 2, i]) for i, u in enumerate(uploads)]
    mean = secure_mean(quantized, settings)
    for k in range(2):
        exact = np.mean([np.asarray(u[k], np.float64) for u in uploads], axis=0)
        assert np.max(np.abs(mean[k] - exact)) <= settings.bound()
    again = secure_mean([quantize_upload(u, 1, settings, [1, 2, i]) for i, u in enumerate(uploads)], settings)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(mean, again, strict=True))
    assert settings.bound() == 2 * 8.0 / 2**22 + 2**-19 / 2  # δ + half a float32 ulp of 2r = 16


def test_values_outside_the_clip_range_are_clipped():
    settings = SecAggSettings(on=True, clip_range=1.0)
    uploads = [[np.array([3.0, -0.5], np.float32)], [np.array([3.0, 0.5], np.float32)]]
    mean = secure_mean([quantize_upload(u, 1, settings, [i]) for i, u in enumerate(uploads)], settings)[0]
    assert mean == pytest.approx([1.0, 0.0], abs=settings.bound())


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "feddyn", "fedadmm", "losac"])
def test_one_secure_round_equals_the_plain_round_within_the_bound(algorithm):
    """The rule gets |S| replies holding the mean: means, sums /N and Σ come out as from the single replies."""
    plain = run_inprocess({**LSQ, "algorithm": algorithm})
    secure = run_inprocess({**SECURE, "algorithm": algorithm})
    bound = SecAggSettings(on=True).bound()
    # one round moves x by a mean (or Σ/N, N ≥ S) of uploads, each off by at most `bound`, plus float32 rounding
    slack = bound + np.spacing(np.abs(plain.x).astype(np.float32))
    assert np.all(np.abs(secure.x - plain.x) <= slack)
    assert secure.x.tobytes() != plain.x.tobytes()  # the quantisation is there
    assert secure.accepted == plain.accepted  # the ledger: the clients whose uploads entered the sum


# ---- what the server and its observers see -------------------------------------------------------------------
class Watcher(RoundObserver):
    def __init__(self, reject: int | None = None):
        self.screened, self.before, self.after, self.reject = [], [], [], reject

    def screen(self, server_round, reply):
        self.screened.append(reply)
        return "screened out" if reply.partition_id == self.reject else None

    def replied(self, server_round, replies):
        self.before.extend(replies)

    def aggregated(self, server_round, strategy, x_before, replies):
        self.after.extend(replies)


def test_observers_get_the_cohorts_mean_never_one_clients_upload():
    plain, secure = Watcher(), Watcher()
    run_inprocess({**LSQ, "algorithm": "scaffold"}, observers=[plain])
    run_inprocess({**SECURE, "algorithm": "scaffold"}, observers=[secure])
    assert len(secure.screened) == len(secure.before) == len(secure.after) == 3
    bound = SecAggSettings(on=True).bound()
    for name in ("delta", "delta_c"):
        singles = [r.arrays[name] for r in plain.before]
        assert not np.allclose(singles[0], singles[1])  # single uploads differ …
        for reply in secure.screened + secure.before + secure.after:  # … the secure replies all hold the mean
            assert np.max(np.abs(reply.arrays[name] - np.mean(singles, axis=0))) <= bound
            assert all(np.max(np.abs(reply.arrays[name] - s)) > 10 * bound for s in singles)


def test_a_reply_rejected_inside_the_sum_rejects_the_round():
    watcher = Watcher(reject=0)
    cfg = {**SECURE, "num-clients": 3, "min-replies": 0.0}
    strategy = run_inprocess(cfg, observers=[watcher])
    assert watcher.before == [] and strategy.accepted == {}
    assert strategy.x.tobytes() == strategy.plan.initial_x.astype(np.float32).tobytes()


def test_the_plain_path_is_untouched():
    plain = run_inprocess({**LSQ, "algorithm": "fedavg"})
    assert plain.stage(SecureSum) is None
    secure_cfg = with_data_clients(resolve(SECURE))
    plan = build_plan(secure_cfg, record=False)
    assert build_strategy(secure_cfg, plan).stage(SecureSum) is not None


# ---- the client ----------------------------------------------------------------------------------------------
def _fit_message(run_config):
    """The first fit instruction of a run, as the Message a SuperNode receives, and that node's Context."""
    cfg = with_data_clients(resolve(run_config))
    strategy = build_strategy(cfg, build_plan(cfg, record=False, run_id=1))
    strategy.plan.query_workers = 1
    server = RoundLoop(strategy, None)
    for context in node_contexts(run_config, cfg.num_clients, 1):
        server.client_manager().register(InProcessProxy(str(context.node_id), context))
    (proxy, ins), *_ = strategy.configure_fit(1, strategy.initialize_parameters(server.client_manager()),
                                              server.client_manager())  # fmt: skip
    content = compat.fitins_to_recorddict(ins, True)
    return Message(content, dst_node_id=proxy.context.node_id, message_type=MessageType.TRAIN), proxy.context


def test_the_gate_hands_plain_messages_to_the_app_untouched(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_task_id", "_run_id", "_node_id"):  # what Flower's runtime sets before a message is made
        monkeypatch.setattr(TaskIdentity, name, 1)
    message, context = _fit_message({**LSQ, "algorithm": "fedavg"})
    state = np.random.get_state()
    with_mod = compat.recorddict_to_fitres(client_app(message, context).content, False)
    without = compat.recorddict_to_fitres(ClientApp(client_fn=client_fn)(message, context).content, False)
    assert with_mod.parameters.tensors == without.parameters.tensors and with_mod.parameters.tensors
    assert with_mod.num_examples == without.num_examples and with_mod.metrics.keys() == without.metrics.keys()
    assert np.random.get_state()[1].tobytes() == state[1].tobytes()
    seen = []
    assert secagg_mod(message, context, lambda m, c: seen.append(m) or "reply") == "reply" and seen == [message]


def _node(dim=3):
    cfg = resolve(SECURE)
    model = SimpleNamespace(dim=dim, buffers=torch.zeros(0))
    return SimpleNamespace(cfg=cfg, model=model, partition_id=1, noise_secret=0)


def test_the_client_refuses_an_upload_the_server_would_reject():
    node, config = _node(), {"round": 1}
    good = ([np.zeros(3, np.float32)], 50, {"fedsuite.arrays": "delta", "loss": 1.0})
    assert secure_reply(node, config, *good)[1] == 1  # every client weighs 1
    bad = {
        "error": ([], 0, {"error": "FloatingPointError: uplink array 'delta' is not finite"}),
        "non-finite": ([np.array([0, np.nan, 0], np.float32)], 5, {"fedsuite.arrays": "delta"}),
        "shape": ([np.zeros(4, np.float32)], 5, {"fedsuite.arrays": "delta"}),
        "names": ([np.zeros(3, np.float32)], 5, {"fedsuite.arrays": "delta,delta_c"}),
        "loss": ([np.zeros(3, np.float32)], 5, {"fedsuite.arrays": "delta", "loss": math.inf}),
    }
    for what, reply in bad.items():
        with pytest.raises(SecureUploadRefused):
            secure_reply(node, config, *reply)
        assert what


# ---- a real SecAgg+ round ------------------------------------------------------------------------------------
def test_flwr_run_with_secagg_equals_the_inprocess_arithmetic(tmp_path, monkeypatch):
    """`flwr run` with SecAgg+ (3 SuperNodes, 2 rounds of FedAvg on synthetic-lsq) ends with the in-process SecAgg+
    arithmetic's model byte for byte, and within the derived bound of the plain run."""
    from simulation.launcher import launch
    from simulation.launcher.processes import tagged_processes
    from tests.conftest import SESSION

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    cfg = {**SECURE, "algorithm": "fedavg", "num-clients": 3, "num-server-rounds": 2}
    folder = launch.run({**cfg, "checkpoint-every": 2, "out-dir": str(tmp_path), "run-name": "secure"}, quiet=True)
    state = checkpoint.load(Path(folder)).state
    arithmetic = run_inprocess(cfg)
    assert state["rule"]["x"].tobytes() == arithmetic.x.tobytes()
    assert state["accepted"] == {0: 2, 1: 2, 2: 2}
    plain = run_inprocess({**cfg, "secagg": False})
    # FedAvg moves x by the mean; with non-expansive local steps an error e_t carries over at most ‖e_t‖₂, so after
    # R rounds ‖x_secure − x_plain‖₂ ≤ R·√d·(bound + float32 rounding of x)
    rounds, dim = 2, plain.x.size
    slack = rounds * math.sqrt(dim) * (SecAggSettings(on=True).bound() + float(np.spacing(np.float32(1.0))))
    assert np.linalg.norm(arithmetic.x.astype(np.float64) - plain.x) <= slack
    assert not tagged_processes(env=SESSION), "the launch left processes of its run running"


def test_secure_sum_server_is_the_inprocess_engine_for_secagg():
    assert issubclass(SecureSumRound, FitRound)
