"""Cohort batching under `flwr run` (batch-clients=true with client-mapping='logical', fedsuite/batched/shares.py,
docs/running/batched.md#under-flwr-run): each SuperNode's share of a round travels in one message and is trained
there batched. Through the ClientApp's messages the run equals the dispatcher's in-process run bit for bit (one
share) and the one-at-a-time run up to float64 rounding (two shares), for every algorithm of the registry; a client
that fails is one failure, never its share; a lost share message is one failure per client it carried; a reply that
does not hold what it counts is rejected for each of its clients; the cohort goes to the nodes in blocks.
The real Ray run is in tests/test_flwr_run.py (test_batched_shares_under_ray_equal_the_one_at_a_time_run)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.common import Code, FitIns, FitRes, Parameters, Status

from fedsuite import testing as kit
from fedsuite.batched.server import LostWithShare, _send
from fedsuite.batched.shares import (
    SHARE_KEY,
    ShareError,
    pack_instructions,
    pack_replies,
    unpack_instructions,
    unpack_reply,
)
from fedsuite.codec.payload import PARTITION_KEY
from fedsuite.registry import known as registry
from fedsuite.server.replies import LOST_WORKER, describe_failure
from fedsuite.server.routing import Router
from fedsuite.server.wire import arrays_of, to_parameters
from tests.test_batched_clients import (  # noqa: F401 (stacked_calls: a fixture)
    DOUBLE,
    TOLERANCE_FLOAT64,
    _gap,
    break_client_1_after_training,
    stacked_calls,
)

SHARED = {**DOUBLE, "batch-clients": True}


@pytest.mark.parametrize("name", tuple(registry.ALGORITHMS))
def test_every_algorithm_in_share_messages_equals_one_at_a_time(name, stacked_calls, caplog):  # noqa: F811
    plain = kit.run_algorithm(name, DOUBLE)
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        shared = kit.run_algorithm(name, {**SHARED, "batch-messages": 2}, messages=True)
    assert any("4 clients in 2 message(s)" in r.getMessage() for r in caplog.records)
    assert stacked_calls == [(2, DOUBLE["local-steps"])] * (2 * DOUBLE["num-server-rounds"])  # two shares of two
    for a, b in zip(plain.rounds, shared.rounds, strict=True):
        assert _gap(a.x, b.x) <= TOLERANCE_FLOAT64, f"round {a.round}: {_gap(a.x, b.x):.3e}"
        assert a.row["rejected"] == b.row["rejected"] == 0 and a.row["replies"] == b.row["replies"]
        assert a.row["bytes_up_per_client"] == b.row["bytes_up_per_client"]


@pytest.mark.parametrize("name", ["scaffold", "fedspeed", "mimesvrg", "fadamgt"])
def test_one_share_is_the_in_process_batched_run_bit_for_bit(name, stacked_calls):  # noqa: F811
    direct = kit.run_algorithm(name, SHARED)
    shared = kit.run_algorithm(name, SHARED, messages=True)
    assert kit.identical(direct.x, shared.x)
    assert stacked_calls[-1] == (4, DOUBLE["local-steps"])  # the whole cohort in one message, one group


def test_a_client_failing_inside_a_share_is_one_rejected_reply_never_its_share(monkeypatch, stacked_calls, caplog):  # noqa: F811
    break_client_1_after_training(monkeypatch)
    plain = kit.run_algorithm("scaffold", DOUBLE)
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        shared = kit.run_algorithm("scaffold", SHARED, messages=True)
    rejected = [r.row["rejected"] for r in shared.rounds]
    assert rejected == [r.row["rejected"] for r in plain.rounds] and sum(rejected) >= 1
    assert any("client 1 rejected: RuntimeError: client 1 breaks after training" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert _gap(plain.x, shared.x) <= TOLERANCE_FLOAT64
    assert stacked_calls


def _ins(pid: int, arrays: list[np.ndarray]) -> FitIns:
    return FitIns(to_parameters(arrays), {PARTITION_KEY: pid, "round": 3, "lr": 0.1})


def test_the_shared_arrays_travel_once_and_each_members_own_arrays_after_them():
    model, c = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    common = to_parameters([model, c])
    members = [FitIns(common, {PARTITION_KEY: 0}), _ins(1, [model, c, np.full(4, 7, np.float32)]),
               FitIns(common, {PARTITION_KEY: 2})]  # fmt: skip
    message = pack_instructions(members)
    assert len(message.parameters.tensors) == 3  # model and c once, member 1's own array after them
    unpacked = unpack_instructions(arrays_of(message.parameters), message.config)
    assert [cfg[PARTITION_KEY] for _, cfg in unpacked] == [0, 1, 2]
    assert [len(a) for a, _ in unpacked] == [2, 3, 2]
    np.testing.assert_array_equal(unpacked[1][0][2], np.full(4, 7, np.float32))
    assert all(cfg == ins.config for (_, cfg), ins in zip(unpacked, members, strict=True))
    with pytest.raises(ShareError, match="fewer than its members count"):
        unpack_instructions(arrays_of(message.parameters)[:2], message.config)


def _reply(arrays_by_member, metrics_by_member) -> FitRes:
    triples = [(a, 10 + i, m) for i, (a, m) in enumerate(zip(arrays_by_member, metrics_by_member, strict=True))]
    arrays, examples, metrics = pack_replies(triples)
    assert examples == sum(10 + i for i in range(len(triples)))
    return FitRes(Status(Code.OK, "Success"), to_parameters(arrays), examples, metrics)


def test_a_share_reply_splits_into_each_clients_own_reply():
    members = [_ins(5, [np.zeros(3, np.float32)]), _ins(9, [np.zeros(3, np.float32)])]
    res = _reply([[np.ones(3, np.float32)], []], [{"partition-id": 5, "loss": 0.5}, {"partition-id": 9, "error": "E"}])
    first, second = unpack_reply(res, members)
    assert first.num_examples == 10 and first.metrics == {"partition-id": 5, "loss": 0.5}
    np.testing.assert_array_equal(arrays_of(first.parameters)[0], np.ones(3, np.float32))
    assert second.metrics == {"partition-id": 9, "error": "E"} and second.parameters.tensors == []


@pytest.mark.parametrize("spoil, why", [
    (lambda m: m.update({SHARE_KEY: 3}), "holds 3 members, 2 were sent"),
    (lambda m: m.pop("fedsuite.share.1.#arrays"), "member 1: #arrays=None is missing"),
    (lambda m: m.update({"fedsuite.share.0.#arrays": 2}), "fewer than counted"),
    (lambda m: m.update({"fedsuite.share.1.#arrays": 0}), "2 arrays, 1 counted"),
])  # fmt: skip
def test_a_share_reply_that_does_not_hold_what_it_counts_is_an_error_reply_for_each_client(spoil, why):
    members = [_ins(5, [np.zeros(3, np.float32)]), _ins(9, [np.zeros(3, np.float32)])]
    res = _reply([[np.ones(3, np.float32)], [np.ones(3, np.float32)]], [{"partition-id": 5}, {"partition-id": 9}])
    spoil(res.metrics)
    replies = unpack_reply(res, members)
    assert [r.metrics["partition-id"] for r in replies] == [5, 9]
    assert all(r.metrics["error"].startswith("ShareError: ") and why in r.metrics["error"] for r in replies)


class _Node:
    def __init__(self, cid: str, error: BaseException | None = None):
        self.cid, self.error, self.sent = cid, error, []

    def fit(self, ins, timeout, group_id):
        self.sent.append(ins)
        if self.error is not None:
            raise self.error
        n = int(ins.config.get(SHARE_KEY, 1))
        pids = [ins.config[f"fedsuite.share.{i}.{PARTITION_KEY}"] for i in range(n)]
        return _reply([[np.ones(2, np.float32)] for _ in pids], [{"partition-id": p} for p in pids])


def test_a_lost_share_message_is_one_failure_per_client_and_one_lost_worker():
    class ActorDiedError(RuntimeError):
        pass

    node = _Node("7", ActorDiedError("the worker died"))
    results, failures = _send([(node, _ins(pid, [np.zeros(2, np.float32)])) for pid in (1, 2, 3)], 1, None)
    assert results == [] and len(failures) == 3 and len(node.sent) == 1  # one message for the three
    assert sum(LOST_WORKER in describe_failure(f) for f in failures) == 1  # the worker died once
    assert all(isinstance(f, LostWithShare) for f in failures[1:])
    assert "client 2 was lost with the message that carried clients [1, 2, 3] to node 7" in str(failures[1])


def test_a_node_with_one_client_gets_its_instruction_as_it_is():
    node = _Node("3")
    ins = _ins(4, [np.zeros(2, np.float32)])
    node.fit = lambda message, timeout, group_id: (node.sent.append(message) or FitRes(
        Status(Code.OK, ""), Parameters([], ""), 1, {"partition-id": 4}))  # fmt: skip
    results, failures = _send([(node, ins)], 1, None)
    assert node.sent == [ins] and failures == [] and results[0][1].metrics == {"partition-id": 4}


class _Manager:
    def __init__(self, cids):
        self.proxies = {c: _Node(c) for c in cids}

    def wait_for(self, n, timeout):
        return True

    def all(self):
        return self.proxies


@pytest.mark.parametrize("shares, nodes, expected", [
    (1, 2, ["0"] * 10),
    (2, 2, ["0"] * 5 + ["1"] * 5),
    (3, 2, ["0"] * 5 + ["1"] * 5),  # more shares than nodes: one block a node
    (20, 3, ["0"] * 4 + ["1"] * 3 + ["2"] * 3),
    (0, 3, ["0", "1", "2", "0", "1", "2", "0", "1", "2", "0"]),  # no sharing: round-robin, as always
])  # fmt: skip
def test_the_cohort_goes_to_the_nodes_in_blocks(shares, nodes, expected):
    router = Router(100, "logical", 1.0, 1, shares)
    manager = _Manager([str(n) for n in range(nodes)])
    routed = router.route(list(range(10)), manager)
    assert [routed[pid].cid for pid in range(10)] == expected
    spread = router.route(list(range(10)), manager, blocks=False)  # evaluation: one message each, round-robin
    assert [spread[pid].cid for pid in range(10)] == [str(i % nodes) for i in range(10)]


def test_a_member_whose_own_path_raises_on_the_node_is_a_failure_as_in_process(monkeypatch):
    from fedsuite.node import app as client_app
    from fedsuite.run.inprocess import LostClient

    real = client_app.node_for

    def breaking(context, partition_id=None, state_key=None):
        if partition_id == 1:
            raise OSError("the node cannot read client 1's files")
        return real(context, partition_id, state_key)

    monkeypatch.setattr(client_app, "node_for", breaking)
    with pytest.raises(LostClient, match=r"failed: OSError\(\"the node cannot read client 1's files"):
        kit.run_algorithm("scaffold", SHARED)  # in process: a failure, which the kit's runs never allow
    with pytest.raises(LostClient, match=r"failed: LostOnNode\(\"client 1: OSError: the node cannot read client 1's"):
        kit.run_algorithm("scaffold", SHARED, messages=True)  # in a share: a failure too, not a rejected reply


def test_the_members_share_the_leading_arrays_read_only():
    model = np.arange(4, dtype=np.float32)
    message = pack_instructions([FitIns(to_parameters([model]), {PARTITION_KEY: p}) for p in (0, 1)])
    writable = [np.array(a) for a in arrays_of(message.parameters)]  # as Flower's wrapper decodes them
    (first, _), (second, _) = unpack_instructions(writable, message.config)
    assert not first[0].flags.writeable and not second[0].flags.writeable  # a client copies what it writes
    np.testing.assert_array_equal(first[0], model)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "many", 1.5])
def test_a_count_that_is_no_whole_number_is_rejected_for_each_client(value):
    members = [_ins(5, [np.zeros(3, np.float32)]), _ins(9, [np.zeros(3, np.float32)])]
    res = _reply([[np.ones(3, np.float32)], [np.ones(3, np.float32)]], [{"partition-id": 5}, {"partition-id": 9}])
    res.metrics["fedsuite.share.0.#arrays"] = value
    assert all(r.metrics["error"].startswith("ShareError: ") for r in unpack_reply(res, members))


def test_a_member_answering_for_another_client_is_rejected_for_each_client():
    members = [_ins(5, [np.zeros(3, np.float32)]), _ins(9, [np.zeros(3, np.float32)])]
    res = _reply([[np.ones(3, np.float32)], [np.ones(3, np.float32)]], [{"partition-id": 9}, {"partition-id": 9}])
    replies = unpack_reply(res, members)
    assert [r.metrics["partition-id"] for r in replies] == [5, 9]
    assert all("member 0 answers as partition-id 9, but client 5 was sent in that place" in r.metrics["error"]
               for r in replies)  # fmt: skip


@pytest.mark.parametrize("changes, why", [
    ({"secagg": True, "client-mapping": "fixed"}, "secagg=true"),
    ({"client-mapping": "fixed"}, "client-mapping='fixed'"),
    ({}, "the model has buffers"),
])  # fmt: skip
def test_what_keeps_a_rounds_clients_in_one_message_each_is_said(changes, why):
    from fedsuite.batched.notice import why_not_shared
    from fedsuite.config.run_config import resolve
    from fedsuite.server.compose import batch_shares

    cfg = resolve({"batch-clients": True, "batch-messages": 3, **changes})
    has_buffers = not changes
    assert why in why_not_shared(cfg, has_buffers) and batch_shares(cfg, has_buffers) == 0
    assert batch_shares(resolve({"batch-clients": True, "batch-messages": 3}), False) == 3
    assert batch_shares(resolve({"batch-messages": 3}), False) == 0


def test_dp_sgd_clients_travel_in_one_message_per_node():
    """DP-SGD's clients train stacked (fedsuite/batched/private.py), so they share a node's message."""
    from fedsuite.batched.notice import why_not_shared
    from fedsuite.config.run_config import resolve
    from fedsuite.server.compose import batch_shares

    cfg = resolve({"batch-clients": True, "batch-messages": 3, "dp-sgd": True, "local-steps": 3})
    assert why_not_shared(cfg, False) is None and batch_shares(cfg, False) == 3
