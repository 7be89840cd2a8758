"""client-mapping='fixed' (docs/deployment/index.md): the server asks each connected node once for its partition.
A node whose answer fails (a SuperNode restarting while it is asked: Flower raises its error reply) is logged and
asked again until the node wait ends; it never ends the run."""

from __future__ import annotations

import logging

from flwr.common import Code, GetPropertiesRes, Status

from fedsuite.server.routing import Router


class Node:
    def __init__(self, cid: str, pid: int, fails: int = 0):
        self.cid, self.pid, self.fails, self.asked = cid, pid, fails, 0

    def get_properties(self, ins, timeout, group_id):
        self.asked += 1
        if self.asked <= self.fails:
            raise ValueError("Message contains an Error (reason: Node Unavailable)")
        return GetPropertiesRes(Status(Code.OK, ""), {"partition-id": self.pid, "num-partitions": 2})


class Manager:
    def __init__(self, nodes):
        self.nodes = {n.cid: n for n in nodes}

    def wait_for(self, num, timeout):
        return True

    def all(self):
        return self.nodes


def test_a_node_whose_answer_fails_is_asked_again_and_mapped(caplog):
    flaky, steady = Node("7", 1, fails=1), Node("3", 0)
    router = Router(2, "fixed", wait_seconds=5.0, workers=1)
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        routed = router.route([0, 1], Manager([flaky, steady]))
    assert {pid: node.cid for pid, node in routed.items()} == {0: "3", 1: "7"}
    assert flaky.asked == 2 and steady.asked == 1
    said = [r.getMessage() for r in caplog.records]
    assert any("node 7 did not say which partition it holds (ValueError" in line for line in said)


def test_a_node_that_never_answers_leaves_its_partition_unmapped(caplog):
    gone, steady = Node("7", 1, fails=10**6), Node("3", 0)
    router = Router(2, "fixed", wait_seconds=0.0, workers=1)
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        routed = router.route([0, 1], Manager([gone, steady]))
    assert list(routed) == [0]
    assert any("only 1 of 2 partitions have a node" in r.getMessage() for r in caplog.records)
