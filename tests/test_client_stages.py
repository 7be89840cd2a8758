"""Client round stages (fedsuite/stages/client.py): the client adapter calls every stage of its client at the same
points of each training round without knowing it by name; a stage that does nothing leaves a run bit-identical; a
stage's release is what the server receives, its metrics and example count are the reply's; the batched engine calls
the same hooks and trains alone the clients of a stage that says so; the run config (and the client's model) builds
exactly the stages it switches on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsuite.batched import dispatch
from fedsuite.codec.payload import ALGORITHM_KEY, ARRAYS_KEY
from fedsuite.config.run_config import resolve
from fedsuite.node import client as client_adapter
from fedsuite.node.holdings import ClientNode
from fedsuite.privacy.dp_sgd import SampleLevelStage
from fedsuite.privacy.release import CLIP_KEY, ClientLevelRelease
from fedsuite.privacy.secagg_stage import SecureUpload
from fedsuite.registry import known as registry
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.observers import RoundObserver
from fedsuite.stages.client import ClientStage
from fedsuite.stages.client_run import client_stages
from fedsuite.stages.model_buffers import ModelBuffers
from fedsuite.stages.relaxed_init import RelaxedStart
from fedsuite.testing.kit import LSQ, PARTIAL

ROUNDS, COHORT = PARTIAL["num-server-rounds"], PARTIAL["clients-per-round"]
FINISH = ["before_release", "release", "metrics", "num_examples"]
CLIENT_DP = {"dp": "clients", "dp-noise": 0.5, "dp-clip": 1.0, "dp-noise-source": "seeded"}


class Recording(ClientStage):
    """Every hook in the order it was called, with what it saw."""

    def __init__(self):
        self.calls: list[str] = []
        self.rounds: list[int] = []
        self.scalars: list[dict] = []
        self.uplinks: list[set[str]] = []
        self.configs: list[dict] = []

    def prepare(self, node, ctx):
        self.calls.append("prepare")
        self.rounds.append(ctx.round)
        self.scalars.append(dict(ctx.scalars))

    def before_release(self, fit):
        self.calls.append("before_release")

    def release(self, uplink, fit, node):
        self.calls.append("release")
        self.uplinks.append(set(uplink))
        self.configs.append(dict(fit.config))
        return uplink, {}

    def metrics(self, metrics, fit):
        self.calls.append("metrics")
        return metrics

    def num_examples(self, n):
        self.calls.append("num_examples")
        return n


class Scaling(ClientStage):
    """Releases every upload array times `factor`, says so in the metrics and counts `examples` examples."""

    def __init__(self, factor: float, examples: int):
        self.factor, self.examples = factor, examples

    def release(self, uplink, fit, node):
        return {name: array * self.factor for name, array in uplink.items()}, {"scaled-by": self.factor}

    def metrics(self, metrics, fit):
        return {**metrics, "scaled": 1}

    def num_examples(self, n):
        return self.examples


class Replies(RoundObserver):
    def __init__(self):
        self.by_round: dict[int, list] = {}
        self.queries = 0

    def replied(self, server_round, replies):
        self.by_round[server_round] = replies

    def queried(self, server_round, x, answers):
        self.queries += 1


def with_stage(monkeypatch, stage: ClientStage) -> None:
    """Every client's stages, as its run config builds them, and `stage` after them."""
    monkeypatch.setattr(client_adapter, "client_stages", lambda *args: [*client_stages(*args), stage])


@pytest.mark.parametrize(
    "keys",
    [{"algorithm": "scaffold"}, {"algorithm": "fedavg", **CLIENT_DP}, {"algorithm": "scaffold", "batch-clients": True}],
    ids=["scaffold", "client-dp", "batched"],
)
def test_a_do_nothing_stage_changes_no_bit(monkeypatch, keys):
    plain = run_inprocess({**PARTIAL, **keys}).x
    with_stage(monkeypatch, ClientStage())
    assert run_inprocess({**PARTIAL, **keys}).x.tobytes() == plain.tobytes()


def test_every_hook_is_called_in_order_for_every_client_of_every_round(monkeypatch):
    stage = Recording()
    with_stage(monkeypatch, stage)
    run_inprocess({**PARTIAL, "algorithm": "scaffold", **CLIENT_DP})
    assert stage.calls == ["prepare", *FINISH] * (ROUNDS * COHORT)
    assert stage.rounds == [r for r in range(1, ROUNDS + 1) for _ in range(COHORT)]
    assert all(uplink == {"delta", "delta_c"} for uplink in stage.uplinks)  # released after client-level DP's
    assert all(CLIP_KEY in config for config in stage.configs)  # sent to every client, read by client-level DP …
    assert all(CLIP_KEY not in scalars for scalars in stage.scalars)  # … and so not one of the rule's scalars


def test_the_batched_engine_prepares_a_rounds_clients_then_finishes_each(monkeypatch):
    stage = Recording()
    with_stage(monkeypatch, stage)
    run_inprocess({**PARTIAL, "algorithm": "scaffold", "batch-clients": True})
    assert stage.calls == (["prepare"] * COHORT + FINISH * COHORT) * ROUNDS


def test_a_server_query_calls_no_stage(monkeypatch):
    stage, replies = Recording(), Replies()
    with_stage(monkeypatch, stage)
    run_inprocess({**PARTIAL, "algorithm": "mimesvrg"}, observers=[replies])
    assert replies.queries == ROUNDS  # a full-gradient query before every round
    assert stage.calls == ["prepare", *FINISH] * (ROUNDS * COHORT)


def test_a_stages_release_metrics_and_example_count_are_what_the_server_receives(monkeypatch):
    plain, scaled = Replies(), Replies()
    run_inprocess({**PARTIAL, "algorithm": "fedavg"}, observers=[plain])
    with_stage(monkeypatch, Scaling(2.0, examples=7))
    run_inprocess({**PARTIAL, "algorithm": "fedavg"}, observers=[scaled])
    first, staged = plain.by_round[1], scaled.by_round[1]  # the same x^1: the same training, twice the upload
    assert [r.partition_id for r in staged] == [r.partition_id for r in first]
    for before, after in zip(first, staged, strict=True):
        assert set(after.arrays) == set(before.arrays) == {"delta"}
        assert np.array_equal(after.arrays["delta"], 2.0 * before.arrays["delta"])
        assert after.num_examples == 7 and before.num_examples != 7
        assert (after.metrics["scaled-by"], after.metrics["scaled"]) == (2.0, 1)
        assert after.metrics["loss"] == before.metrics["loss"]


def test_a_stage_that_trains_alone_keeps_the_batched_engine_from_stacking(monkeypatch):
    class Alone(ClientStage):
        trains_alone = "this stage trains one client at a time"

    stacked = []
    original = dispatch.train_stacked
    monkeypatch.setattr(dispatch, "train_stacked", lambda *a, **k: stacked.append(1) or original(*a, **k))
    run_inprocess({**PARTIAL, "algorithm": "fedavg", "batch-clients": True})
    assert stacked  # the run stacks without the stage
    stacked.clear()
    with_stage(monkeypatch, Alone())
    run_inprocess({**PARTIAL, "algorithm": "fedavg", "batch-clients": True})
    assert not stacked


def test_the_run_config_builds_the_stages_it_switches_on():
    assert client_stages(resolve({**PARTIAL, "algorithm": "fedavg"})) == []
    (dp,) = client_stages(resolve({**PARTIAL, "algorithm": "fedavg", **CLIENT_DP}))
    assert isinstance(dp, ClientLevelRelease) and dp.num_examples(12) == 1
    sample = {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 1.0}
    (sgd,) = client_stages(resolve({**PARTIAL, "algorithm": "fedavg", **sample}))
    assert isinstance(sgd, SampleLevelStage) and sgd.trains_alone is None  # stacked: fedsuite/batched/private.py


def test_two_stages_that_each_give_the_loop_a_gradient_oracle_are_one_error_reply():
    class Oracle(ClientStage):
        def prepare(self, node, ctx):
            return object()

    cfg = resolve({**LSQ, "algorithm": "fedavg"})
    node = ClientNode(cfg, 1, 5)
    client = client_adapter.RuleClient(registry.build_client(cfg, node), [Oracle(), Oracle()])
    config = {"round": 1, "lr": 0.05, ARRAYS_KEY: "model", ALGORITHM_KEY: "fedavg"}
    arrays, examples, metrics = client.fit(client.get_parameters({}), config)
    assert (arrays, examples) == ([], 0)
    assert metrics["error"] == (
        "ValueError: client stages Oracle, Oracle each give the local loop a gradient oracle; it takes one"
    )


def test_the_run_config_builds_the_client_stages_of_secure_aggregation_and_relaxed_initialisation():
    class Node:
        class model:  # noqa: N801 (a stand-in for the node's model)
            buffers = torch.zeros(0)

    class Rule:
        node, state, uploads_start_shift = Node, None, False

    plain = resolve({**PARTIAL, "algorithm": "fedavg"})
    assert client_stages(plain) == [] and client_stages(plain, Rule) == []
    (relaxed,) = client_stages(resolve({**PARTIAL, "algorithm": "fedavg", "relaxed-init": 0.5}), Rule)
    assert isinstance(relaxed, RelaxedStart) and relaxed.beta == 0.5
    assert client_stages(resolve({**PARTIAL, "algorithm": "fedavg", "relaxed-init": 0.5})) == []  # no client: none
    Node.model.buffers = torch.zeros(3)
    (own,) = client_stages(resolve({**PARTIAL, "algorithm": "fedavg", "buffers": "local"}), Rule)
    assert isinstance(own, ModelBuffers) and own.mode == "local" and own.trains_alone
    (secure,) = client_stages(resolve({**PARTIAL, "algorithm": "fedavg", "secagg": True, "client-mapping": "fixed"}))
    assert isinstance(secure, SecureUpload) and "secagg=true" in secure.trains_alone
