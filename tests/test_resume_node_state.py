"""Node-held client state across a SuperLink crash (in process): SuperNodes keep SCAFFOLD's c_i in their own
client-state-dir; a run stopped mid-round and resumed with resume-from (a new run id) finds that state under the
state key the server sends, and ends bit-identical to the uninterrupted run. A resume that the nodes' one-round
undo cannot follow is refused in one line."""

from __future__ import annotations

import json

import pytest
from flwr.app import RecordDict
from flwr.common import Context

from fedsuite.node.app import node_for
from fedsuite.results import checkpoint
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.observers import RoundObserver

CLIENTS = 4
CONFIG = {
    "algorithm": "scaffold",
    "dataset": "synthetic-lsq",
    "num-clients": CLIENTS,
    "clients-per-round": 2,
    "synthetic-dim": 5,
    "synthetic-samples": 12,
    "batch-size": 4,
    "local-steps": 3,
    "lr": 0.02,
    "num-server-rounds": 5,
    "eval-every": 1,
    "client-mapping": "fixed",
    "checkpoint-every": 1,
    "client-state": "disk",  # on the nodes, in their node config's client-state-dir
}
TIMING = ("seconds", "elapsed")  # row columns that measure time, not the computation


class Crash(Exception):
    """The SuperLink's host going down."""


class CrashBeforeAggregating(RoundObserver):
    """Stops the server once round `at`'s clients have trained and replied (their new state is written on the
    nodes, not yet accepted): the worst moment for client state."""

    def __init__(self, at: int):
        self.at = at

    def replied(self, server_round, replies):
        if server_round == self.at:
            raise Crash(f"round {server_round}")


def nodes(state_dir) -> list[dict]:
    return [{"partition-id": i, "num-partitions": CLIENTS, "client-state-dir": str(state_dir / f"node-{i}")}
            for i in range(CLIENTS)]  # fmt: skip


def rows(folder) -> list[dict]:
    lines = (folder / "rounds.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not any(t in k for t in TIMING)} for line in lines]


def crashed_run(tmp_path, crash_at: int, **keys) -> tuple[dict, list[dict]]:
    cfg = {**CONFIG, "out-dir": str(tmp_path), "run-name": "crashed", **keys}
    node_configs = nodes(tmp_path / "crashed-nodes")
    with pytest.raises(Crash):
        run_inprocess(cfg, record=True, observers=[CrashBeforeAggregating(crash_at)], run_id=11,
                      node_configs=node_configs)  # fmt: skip
    return cfg, node_configs


def test_scaffold_resumed_after_a_crash_with_node_held_state_equals_the_uninterrupted_run(tmp_path):
    full = run_inprocess({**CONFIG, "out-dir": str(tmp_path), "run-name": "full"}, record=True, run_id=7,
                         node_configs=nodes(tmp_path / "full-nodes"))  # fmt: skip
    cfg, node_configs = crashed_run(tmp_path, crash_at=3)
    assert checkpoint.load(tmp_path / "crashed").server_round == 2
    assert list((tmp_path / "crashed-nodes" / "node-0").glob("run-11"))  # the nodes' state, under the first run id
    resumed = run_inprocess({**cfg, "resume-from": str(tmp_path / "crashed")}, record=True, run_id=12,
                            node_configs=node_configs)  # fmt: skip

    assert resumed.plan.state_key == 11
    assert not list((tmp_path / "crashed-nodes").glob("node-*/run-12"))  # no fresh, empty state for the new id
    assert resumed.x.tobytes() == full.x.tobytes()
    assert rows(tmp_path / "crashed") == rows(tmp_path / "full")


def test_resume_without_the_state_key_would_differ(tmp_path):
    """The comparison above can fail: the same resume with the nodes' state moved away (as under the new run id's
    folder) ends elsewhere."""
    full = run_inprocess({**CONFIG, "out-dir": str(tmp_path), "run-name": "full"}, record=True, run_id=7,
                         node_configs=nodes(tmp_path / "full-nodes"))  # fmt: skip
    cfg, node_configs = crashed_run(tmp_path, crash_at=3)
    for folder in (tmp_path / "crashed-nodes").glob("node-*/run-11"):
        folder.rename(folder.with_name("run-lost"))
    resumed = run_inprocess({**cfg, "resume-from": str(tmp_path / "crashed")}, record=True, run_id=12,
                            node_configs=node_configs)  # fmt: skip
    assert resumed.x.tobytes() != full.x.tobytes()


def test_resume_from_a_checkpoint_the_nodes_trained_past_is_refused(tmp_path):
    cfg, node_configs = crashed_run(tmp_path, crash_at=4, **{"checkpoint-every": 2})  # checkpoint 2, rows to 3
    with pytest.raises(checkpoint.CheckpointError, match="held by the nodes.*recorded round 3.*checkpoint-every=1"):
        run_inprocess({**cfg, "resume-from": str(tmp_path / "crashed")}, record=True, run_id=12,
                      node_configs=node_configs)  # fmt: skip


def test_node_state_folder_is_named_by_the_state_key_else_the_flower_run_id(tmp_path):
    node_config = {"partition-id": 1, "num-partitions": CLIENTS, "client-state-dir": str(tmp_path)}
    context = Context(5, 1, node_config, RecordDict(), dict(CONFIG))
    assert node_for(context).store.path.parent == tmp_path / "run-5"  # a message without a key (older server)
    assert node_for(context, state_key="11").store.path.parent == tmp_path / "run-11"


def test_query_messages_carry_the_state_key_too():
    """A rule's pre-round query (MimeSVRG) reaches the same node-held folder as the fit that follows."""
    import numpy as np
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    from fedsuite.codec.payload import ARRAYS_KEY, STATE_KEY
    from fedsuite.rules.rounds import Query
    from fedsuite.server.query import ask

    seen = []

    class Node:
        def fit(self, ins, timeout, group_id):
            seen.append(ins.config)
            arrays = ndarrays_to_parameters([np.ones(3, np.float32)])
            metrics = {"partition-id": ins.config["fedsuite.partition-id"], ARRAYS_KEY: "gradient",
                       "compute-seconds": 0.0}  # fmt: skip
            return FitRes(Status(Code.OK, ""), arrays, 5, metrics)

    answers = ask(Query(phase="gradient", answer="gradient"), 4, np.zeros(3), {0: Node(), 1: Node()}, 1, 11)
    assert sorted(answers) == [0, 1] and [config[STATE_KEY] for config in seen] == ["11", "11"]


def test_a_state_key_that_is_not_a_plain_name_is_refused(tmp_path):
    """The key names a folder under the operator's client-state-dir: a path in it must not lead elsewhere."""
    from fedsuite.node.trust import NodeConfigError

    context = Context(1, 1, nodes(tmp_path)[0], RecordDict(), CONFIG)
    with pytest.raises(NodeConfigError, match="state key"):
        node_for(context, 0, "../../elsewhere")
