"""Round stages (docs/developer/architecture.md#round-stages): the strategy calls every stage of the run at the same
points of each round without knowing it by name; a stage that does nothing leaves a run bit-identical; a stage's
state is checkpointed under its name; a stage's verdict ends the run."""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite.run.inprocess import run_inprocess
from fedsuite.server import compose
from fedsuite.stages.server import ServerStage
from fedsuite.testing.kit import PARTIAL


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
    monkeypatch.setattr(compose, "server_stages", lambda cfg, privacy: [*built(cfg, privacy), stage])
    return stage


def test_every_hook_is_called_in_order_every_round_and_a_do_nothing_stage_changes_no_bit(monkeypatch):
    plain = run_inprocess({**PARTIAL, "algorithm": "scaffold"}).x
    stage = Recording()
    built = compose.server_stages
    monkeypatch.setattr(compose, "server_stages", lambda cfg, privacy: [*built(cfg, privacy), stage])
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
    monkeypatch.setattr(compose, "server_stages", lambda cfg, privacy: [*built(cfg, privacy), StopAtTwo()])
    strategy = run_inprocess({**PARTIAL, "out-dir": str(tmp_path), "run-name": "r", "num-server-rounds": 4},
                             record=True)  # fmt: skip
    assert strategy.plan.recorder.status == "pruned"
    assert [r["round"] for r in strategy.plan.recorder.rows] == [0, 1, 2]
    assert np.isfinite(strategy.x).all()


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
