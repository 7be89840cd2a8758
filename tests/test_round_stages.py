"""Round stages (docs/developer/architecture.md#round-stages): the strategy calls every stage of the run at the same
points of each round without knowing it by name; a stage that does nothing leaves a run bit-identical; a stage's
state is checkpointed under its name; a stage's verdict ends the run; the model's averaged buffers are a stage built
exactly when the server averages them; neither adapter names a mechanism."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedsuite.config.run_config import resolve
from fedsuite.data import LoadedData
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server import compose
from fedsuite.server.buffers import AveragedBuffers
from fedsuite.server.privacy import BUDGET_SPENT
from fedsuite.server.stages import server_stages
from fedsuite.stages.model_buffers import ModelBuffers
from fedsuite.stages.server import STOPPED, ServerStage
from fedsuite.testing.kit import PARTIAL

ROOT = Path(__file__).resolve().parent.parent
HERE = "tests.test_round_stages"
# The adapters (the strategy, with its evaluation calls, and the client) run the stages in order and name none of the
# mechanisms: no privacy (client-level DP, DP-SGD), secure aggregation, system models, pruning, model buffers,
# relaxed initialisation or batching, not even in a comment or a docstring.
ADAPTERS = ("fedsuite/server/adapter.py", "fedsuite/server/evaluation_calls.py", "fedsuite/node/client.py")
MECHANISMS = re.compile(
    r"privacy|\bdp\b|dp[_-]|sample_level|client_level|secagg|secure|systems|prun|buffer|averag|relax|start_shift"
    r"|last_iterate|batched|batching|batch[_-]clients|unbatch|notice|budget|noise|clip|deadline|dropout",
    re.IGNORECASE,
)


class Recording(ServerStage):
    """Every hook, in the order it was called; its fit-config entry and its state."""

    state_name = "recording"

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.loaded = None

    def stop_before(self, server_round, cohort):
        self.calls.append(("stop_before", server_round))

    def absent(self, server_round, cohort):
        self.calls.append(("absent", server_round))
        return {}

    def round_config(self, server_round, cohort):
        self.calls.append(("round_config", server_round))
        return {"recording-round": server_round}

    def client_config(self, server_round, partition_id):
        return {"recording-client": partition_id}

    def sent(self, server_round, absent):
        self.calls.append(("sent", server_round))
        return {}

    def refused(self, server_round, results, failures):
        self.calls.append(("refused", server_round))

    def received(self, server_round, replies):
        self.calls.append(("received", server_round))
        return {"recording_replies": len(replies)}

    def release(self, server_round, replies):
        self.calls.append(("release", server_round))
        return {}

    def check_row(self, server_round, metrics):
        self.calls.append(("check_row", server_round))

    def state_dict(self):
        return {"calls": len(self.calls)}

    def load_state_dict(self, values):
        self.loaded = values


@pytest.fixture
def recording(monkeypatch):
    stage = Recording()
    built = compose.server_stages
    monkeypatch.setattr(compose, "server_stages", lambda *args: [*built(*args), stage])
    return stage


def test_every_hook_is_called_in_order_every_round_and_a_do_nothing_stage_changes_no_bit(monkeypatch):
    plain = run_inprocess({**PARTIAL, "algorithm": "scaffold"}).x
    stage = Recording()
    built = compose.server_stages
    monkeypatch.setattr(compose, "server_stages", lambda *args: [*built(*args), stage])
    staged = run_inprocess({**PARTIAL, "algorithm": "scaffold"})
    assert staged.x.tobytes() == plain.tobytes()
    order = ["stop_before", "absent", "round_config", "sent", "refused", "received", "release", "check_row"]
    rounds = PARTIAL["num-server-rounds"]
    expected = [("check_row", 0)] + [(hook, r) for r in range(1, rounds + 1) for hook in order]
    assert stage.calls == expected  # round 0: the initial model's row
    assert stage in staged.stages


def test_a_stages_config_entries_reach_the_fit_messages_and_its_figures_the_row(recording):
    from fedsuite.server.observers import RoundObserver

    class Rows(RoundObserver):
        def __init__(self):
            self.rows = []

        def recorded(self, row):
            self.rows.append(row)

    rows = Rows()
    strategy = run_inprocess({**PARTIAL, "algorithm": "fedavg"}, observers=[rows])
    trained = [row for row in rows.rows if row["round"] > 0]
    assert all(row["recording_replies"] == PARTIAL["clients-per-round"] for row in trained)
    fit = strategy.configure_fit(99, None, _Manager(strategy))
    assert fit and all(ins.config["recording-round"] == 99 for _, ins in fit)
    assert sorted(ins.config["recording-client"] for _, ins in fit) == sorted(strategy.plan.sampler.cohort(99))


def test_a_stages_state_is_checkpointed_under_its_name_and_loaded_back(recording):
    strategy = run_inprocess({**PARTIAL, "algorithm": "fedavg"})
    state = strategy.state_dict()
    assert state["recording"] == {"calls": len(recording.calls)}
    strategy.load_state_dict(state)
    assert recording.loaded == state["recording"]
    with pytest.raises(ValueError, match="recording"):
        strategy.load_state_dict({k: v for k, v in state.items() if k != "recording"})


def test_a_stages_verdict_ends_the_run(monkeypatch, tmp_path):
    class StopAtTwo(ServerStage):
        def check_row(self, server_round, metrics):
            return ("pruned", "round 2: the stage says stop") if server_round == 2 else None

    built = compose.server_stages
    monkeypatch.setattr(compose, "server_stages", lambda *args: [*built(*args), StopAtTwo()])
    strategy = run_inprocess({**PARTIAL, "out-dir": str(tmp_path), "run-name": "r", "num-server-rounds": 4},
                             record=True)  # fmt: skip
    assert strategy.plan.recorder.status == "pruned"
    assert [r["round"] for r in strategy.plan.recorder.rows] == [0, 1, 2]
    assert np.isfinite(strategy.x).all()


def test_neither_adapter_names_a_mechanism():
    found = {
        f"{path}:{number}: {line.strip()}"
        for path in ADAPTERS
        for number, line in enumerate((ROOT / path).read_text().splitlines(), 1)
        if MECHANISMS.search(line)
    }
    assert not found, "\n".join(sorted(found))


def test_the_averaged_buffers_stage_is_built_exactly_when_the_server_averages_buffers():
    cfg = resolve({**PARTIAL, "algorithm": "fedavg", "weighting": "samples"})
    initial = np.arange(4, dtype=np.float32)
    assert server_stages(cfg) == [] and server_stages(cfg, None, None) == []
    (averaged,) = server_stages(cfg, None, initial)
    assert isinstance(averaged, AveragedBuffers) and averaged.weighting == "samples"
    assert averaged.state_name == "buffers" and averaged.vector.tobytes() == initial.tobytes()
    assert list(averaged.downlink(1)) == ["buffers"] and averaged.evaluation_args()[0] is averaged.vector
    # the averaged buffers come first, before the stages the run config switches on
    with_dp_target = resolve({**PARTIAL, "algorithm": "fedavg", "dp-sgd": True, "dp-sgd-noise": 1.0})
    first, *rest = server_stages(with_dp_target, None, initial)
    assert isinstance(first, AveragedBuffers) and rest and not any(isinstance(s, AveragedBuffers) for s in rest)


def gray_images() -> LoadedData:
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
    return LoadedData(train=(x[:12], y[:12]), test=(x[12:], y[12:]), num_classes=10)


def small_bn(input_shape, num_classes) -> nn.Module:
    return nn.Sequential(nn.Conv2d(input_shape[0], 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(2 * input_shape[1] * input_shape[2], num_classes))  # fmt: skip


@pytest.mark.parametrize("buffers", ["average", "local"])
def test_a_model_with_buffers_gets_its_stages_on_both_sides(monkeypatch, buffers):
    from fedsuite.node import client as client_adapter
    from fedsuite.stages.client_run import client_stages

    built: list[list] = []
    monkeypatch.setattr(client_adapter, "client_stages", lambda *args: built.append(client_stages(*args)) or built[-1])
    cfg = {"num-clients": 2, "clients-per-round": 2, "num-server-rounds": 1, "local-epochs": 1, "batch-size": 4,
           "partition": "iid", "device": "cpu", "lr": 0.01, "dataset": f"{HERE}:gray_images",
           "model": f"{HERE}:small_bn", "buffers": buffers}  # fmt: skip
    strategy = run_inprocess(cfg)
    averaged = [stage for stage in strategy.stages if isinstance(stage, AveragedBuffers)]
    assert len(averaged) == (buffers == "average") and (strategy.stage(AveragedBuffers) is not None) == (
        buffers == "average"
    )
    assert built and all(len(stages) == 1 and isinstance(stages[0], ModelBuffers) for stages in built)
    assert {stages[0].mode for stages in built} == {buffers}
    built.clear()
    plain = run_inprocess({**PARTIAL, "algorithm": "fedavg"})  # a buffer-free model: no stage on either side
    assert (
        plain.stages == [] and plain.stage(AveragedBuffers) is None and built and all(stages == [] for stages in built)
    )


def test_a_stage_that_stops_the_run_gives_the_status_of_a_spent_budget():
    assert STOPPED == BUDGET_SPENT


class _Manager:
    """The nodes of an in-process run, for one more configure_fit."""

    def __init__(self, strategy):
        from flwr.server.client_manager import SimpleClientManager

        from fedsuite.run.inprocess import InProcessProxy, node_contexts

        self.inner = SimpleClientManager()
        for context in node_contexts(dict(strategy.plan.run_config), 2):
            self.inner.register(InProcessProxy(str(context.node_id), context))

    def __getattr__(self, name):
        return getattr(self.inner, name)
