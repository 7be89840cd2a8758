"""The device-resident round on a real CUDA card: what tests/test_device_replies.py, tests/test_rule_on_device.py,
tests/test_state_tiers.py, tests/test_kept_steps.py and tests/test_batched_dp_sgd.py check on the CPU, checked where
it is meant to run (docs/running/batched.md#replies-on-the-device, docs/running/scale.md#state-on-the-device). CI has
no GPU: these skip there, and simulation/benchmarks/device_check.sh runs them on a lent card.

The model is the float64 linear head of tests/test_batched_clients.py, whose arithmetic on the card is deterministic,
so two paths that do the same operations give the same bits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsuite import testing as kit
from fedsuite.batched import device_replies
from fedsuite.codec.device_arrays import DeviceArrays
from fedsuite.rules.rounds import Reply
from fedsuite.rules.server_rule import ServerRule
from fedsuite.server.observers import RoundObserver
from tests.test_batched_clients import DOUBLE

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ON_CARD = {**DOUBLE, "device": "cuda", "batch-clients": True, "num-server-rounds": 3}


class Kinds(RoundObserver):
    def __init__(self):
        self.on_device: list[bool] = []

    def aggregated(self, server_round, strategy, x_before, replies):
        self.on_device.append(all(isinstance(r.arrays, DeviceArrays) for r in replies))


@needs_cuda
@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_the_mean_on_the_card_is_the_host_mean_bit_for_bit(weighting):
    generator = torch.Generator().manual_seed(11)
    vectors = [torch.randn(100_003, generator=generator) * 10.0**k for k in range(-3, 4)]
    rule = ServerRule.__new__(ServerRule)
    rule.dim = vectors[0].numel()
    rule.settings = type("S", (), {"weighting": weighting, "expected_cohort": None})()
    card = [Reply(i, 3 + i, 3, 0.1, DeviceArrays({"delta": v.cuda()})) for i, v in enumerate(vectors)]
    host = [Reply(i, 3 + i, 3, 0.1, {"delta": v.numpy().astype(np.float64)}) for i, v in enumerate(vectors)]
    assert kit.identical(rule.cohort_mean(card, "delta"), rule.cohort_mean(host, "delta"))
    rule.settings.expected_cohort = 7.5
    assert kit.identical(rule.cohort_mean(card, "delta"), rule.cohort_mean(host, "delta"))


@needs_cuda
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "feddyn", "fedspeed", "fedsmoo", "fadamgt", "losac"])
def test_replies_and_state_on_the_card_give_the_host_paths_models(name, monkeypatch):
    """Replies left on the card and client state on the card (client-state='device') against replies brought to
    the host and state in files: every round's model equal bit for bit."""
    monkeypatch.setattr(device_replies, "keeps_on_device", lambda client: False)
    host = kit.run_algorithm(name, ON_CARD, keep_client_state=True)
    monkeypatch.undo()
    kinds = Kinds()
    card = kit.run_algorithm(name, {**ON_CARD, "client-state": "device"}, observers=[kinds])
    assert kinds.on_device and all(kinds.on_device)
    for a, b in zip(host.rounds, card.rounds, strict=True):
        assert kit.identical(a.x, b.x), f"round {a.round}"


class Placed(RoundObserver):
    watches_vectors = False  # reads only where the rule is

    def __init__(self):
        self.placed: list[bool] = []

    def aggregated(self, server_round, strategy, x_before, replies):
        self.placed.append(strategy.placement.on_device)


@needs_cuda
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "feddyn", "fedspeed", "fedsmoo", "fadamgt", "losac", "fedadam"])
def test_the_rule_on_the_card_gives_the_host_rules_models(name, monkeypatch):
    """The server rule placed on the card against the rule kept on the host, the replies on the card in both
    (docs/running/batched.md#the-server-rule-on-the-device): every round's model within 1e-6 of its largest entry
    (CUDA divides by a number as a multiplication by its reciprocal, so a state vector may differ in its last bit)."""
    from fedsuite.batched import server as batched_server

    monkeypatch.setattr(batched_server, "allowed_on", lambda device: False)
    host = kit.run_algorithm(name, ON_CARD)
    monkeypatch.undo()
    seen = Placed()
    card = kit.run_algorithm(name, ON_CARD, observers=[seen])
    assert seen.placed == [True] * 3 and isinstance(card.strategy.rule.x, torch.Tensor)
    assert card.strategy.rule.x.device.type == "cuda"
    for a, b in zip(host.rounds, card.rounds, strict=True):
        scale = float(np.max(np.abs(a.x)))
        assert float(np.max(np.abs(a.x.astype(np.float64) - b.x))) <= 1e-6 * scale, f"round {a.round}"


@needs_cuda
def test_a_recorded_step_kept_for_the_run_replays_with_each_rounds_values_and_shapes(monkeypatch):
    """SCAFFOLD over 4 rounds whose clients hold fewer samples than batch-size (their minibatches are smaller than
    it): the step recorded in round 1 and kept gives the models of the run that records nothing."""
    from fedsuite.batched import loop
    from fedsuite.batched.graph import RecordedStep

    made = []
    monkeypatch.setattr(loop, "RecordedStep", lambda *a: made.append(RecordedStep(*a)) or made[-1])
    settings = {**ON_CARD, "num-server-rounds": 4, "synthetic-samples": 4, "batch-size": 6}
    recorded = kit.run_algorithm("scaffold", settings)
    stepwise = kit.run_algorithm("scaffold", {**settings, "cuda-graphs": False})
    assert len(made) == 1 and made[0].failed is None  # recorded once, replayed in rounds 2 to 4
    assert kit.identical(recorded.x, stepwise.x)


@needs_cuda
def test_dp_sgd_stacked_on_the_card_equals_one_at_a_time():
    keys = {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 1.0, "dp-noise-source": "seeded"}
    alone = kit.run_algorithm("fedavg", {**ON_CARD, **keys, "batch-clients": False})
    stacked = kit.run_algorithm("fedavg", {**ON_CARD, **keys})
    gap = float(np.max(np.abs(alone.x.astype(np.float64) - stacked.x.astype(np.float64))))
    assert gap <= 1e-6, gap  # the float32 wire; float64 arithmetic on both paths
