"""The client half as a Flower-free ClientRule behind one NumPyClient adapter (fedsuite/rules/client_rule.py,
fedsuite/node/client.py): the RoundContext a rule reads is decoded from the wire, a failing rule becomes an error
reply, a query reaches the rule's `answer` (and one to a rule without it is refused in one line), and the rule's
module imports no Flower."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch

from fedsuite.codec.payload import ALGORITHM_KEY, ARRAYS_KEY, PARTITION_KEY, STATE_ACCEPTED, STATE_KEY
from fedsuite.config.run_config import resolve
from fedsuite.node.client import RuleClient, client_for, round_context
from fedsuite.node.holdings import ClientNode
from fedsuite.rules.client_rule import ClientRule, RoundContext
from fedsuite.rules.rounds import PHASE_KEY
from fedsuite.testing.kit import LSQ


def wire(**extra) -> dict:
    return {"round": 3, "lr": 0.05, ARRAYS_KEY: "model", ALGORITHM_KEY: "fedavg", **extra}


def node(algorithm: str = "fedavg") -> ClientNode:
    cfg = resolve({**LSQ, "algorithm": algorithm})
    return ClientNode(cfg, 1, 5)


def test_a_round_context_is_decoded_from_the_wire_config():
    down = {"model": torch.zeros(3), "c": torch.ones(3)}
    config = wire(**{"tracking": "0,1", STATE_ACCEPTED: 2, PARTITION_KEY: 1, STATE_KEY: "7", "beta": 0.5})
    ctx = round_context(config, down, partition_id=1)
    assert (ctx.round, ctx.lr, ctx.phase, ctx.tracked) == (3, 0.05, None, True)
    assert set(ctx.down) == {"model", "c"} and ctx.down["c"] is down["c"]
    assert dict(ctx.scalars) == {"beta": 0.5}  # the server rule's own scalars; the adapter's keys are decoded
    assert not round_context(config, down, partition_id=4).tracked
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.lr = 1.0
    with pytest.raises(TypeError):
        ctx.down["model"] = torch.ones(3)  # type: ignore[index]
    query = round_context({"round": 3, PHASE_KEY: "full-gradient", ARRAYS_KEY: "model"}, down, partition_id=1)
    assert (query.phase, query.lr) == ("full-gradient", None)


class Failing(ClientRule):
    def uplink(self, result, rule, ctx):
        raise RuntimeError(f"uplink failed in round {ctx.round}\nsecond line")


class Recording(ClientRule):
    seen: list[RoundContext] = []

    def rule(self, ctx):
        Recording.seen.append(ctx)
        return super().rule(ctx)


def test_a_failing_rule_is_an_error_reply_with_one_line_and_the_traceback():
    client = RuleClient(Failing(node()))
    arrays, examples, metrics = client.fit(client.get_parameters({}), wire())
    assert (arrays, examples) == ([], 0)
    assert metrics["partition-id"] == 1
    assert metrics["error"] == "RuntimeError: uplink failed in round 3"
    assert "Traceback" in metrics["traceback"] and "second line" in metrics["traceback"]


def test_the_adapter_trains_the_rule_with_the_decoded_context():
    Recording.seen = []
    client = RuleClient(Recording(node()))
    arrays, examples, metrics = client.fit(client.get_parameters({}), wire(beta=2))
    assert [a.shape for a in arrays] == [(client.node.model.dim,)] and metrics[ARRAYS_KEY] == "delta"
    assert examples == len(client.node.data) and metrics["steps"] > 0 and "error" not in metrics
    (ctx,) = Recording.seen
    assert (ctx.round, ctx.lr, dict(ctx.scalars)) == (3, 0.05, {"beta": 2})


def test_a_query_to_a_rule_that_answers_none_is_refused_in_one_line():
    client = client_for(resolve({**LSQ, "algorithm": "fedavg"}), node())
    config = {"round": 1, PHASE_KEY: "full-gradient", ARRAYS_KEY: "model"}
    arrays, _, metrics = client.fit(client.get_parameters({}), config)
    assert arrays == []
    assert metrics["error"] == (
        "ValueError: algorithm='fedavg' answers no server query, but was sent the query phase='full-gradient'; give "
        "server and clients the same run config"
    )


def test_a_query_reaches_the_rules_answer():
    cfg = resolve({**LSQ, "algorithm": "mimesvrg"})
    client = client_for(cfg, ClientNode(cfg, 1, 5))
    config = {"round": 1, PHASE_KEY: "full-gradient", ARRAYS_KEY: "model"}
    arrays, examples, metrics = client.fit(client.get_parameters({}), config)
    assert metrics[ARRAYS_KEY] == "full_grad" and examples == len(client.node.data)
    assert arrays[0].shape == (client.node.model.dim,) and np.all(np.isfinite(arrays[0]))


def test_the_client_rule_imports_no_flower():
    code = "import sys, fedsuite.rules.client_rule; print(sorted(m for m in sys.modules if m.split('.')[0] == 'flwr'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
