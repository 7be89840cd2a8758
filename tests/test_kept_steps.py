"""A group's recorded step kept for the run (fedsuite/batched/kept_steps.py, docs/running/batched.md#cuda-graphs): a
later round of the same kind of group writes its values into the kept tensors and replays the step made in the first
round, and gives the very models of a run that builds its step anew every round, for every algorithm of the registry.

A CUDA graph cannot be recorded here; `kept_steps.ON_CPU` stands a `StepOnCpu` in for it: the first round's step
function, called again in every later round. It runs on the first round's tensors as a graph would, so anything a
later round failed to write into them (its x⁰, a stacked rule tensor) changes the result.
"""

from __future__ import annotations

import pytest
import torch

from fedsuite import testing as kit
from fedsuite.batched import kept_steps
from fedsuite.batched.graph import not_replayable
from fedsuite.batched.kept_steps import KeptStep, KeptSteps, StepOnCpu, group_key, refill
from fedsuite.local.adaptive import AdamStep
from fedsuite.local.loop import AddVector, LocalSettings, UpdateRule
from fedsuite.registry import known as registry
from tests.test_batched_clients import BASE

THREE_ROUNDS = {**BASE, "batch-clients": True, "num-server-rounds": 3}
# Algorithms whose stacked step a CUDA graph does not take (fedsuite/batched/graph.py), so nothing is kept
NOT_RECORDED = {"fadamgt": "its gradient sum counts steps", "losac": "12 samples in 5 blocks of unequal size",
                "fedsaga": "the same blocks", "losac-prox": "the same blocks"}  # fmt: skip
BLOCK_TABLES = ("losac", "fedsaga", "losac-prox")


@pytest.fixture
def made(monkeypatch):
    """The StepOnCpu stand-ins made (one per recording a CUDA run would make), with the ON_CPU path on."""
    monkeypatch.setattr(kept_steps, "ON_CPU", True)
    made: list[StepOnCpu] = []
    real = StepOnCpu.__init__

    def counted(self, step):
        made.append(self)
        real(self, step)

    monkeypatch.setattr(StepOnCpu, "__init__", counted)
    return made


@pytest.mark.parametrize("name", tuple(registry.ALGORITHMS))
def test_every_algorithm_gives_the_same_models_with_its_step_kept_for_the_run(name, made, monkeypatch):
    kept = kit.run_algorithm(name, THREE_ROUNDS)
    monkeypatch.setattr(kept_steps, "ON_CPU", False)
    fresh = kit.run_algorithm(name, THREE_ROUNDS)
    assert len(kept.rounds) == len(fresh.rounds) == 3
    for a, b in zip(kept.rounds, fresh.rounds, strict=True):
        assert kit.identical(a.x, b.x), f"round {a.round}"
    assert kit.identical(kept.x, fresh.x)
    # one kind of group (4 clients, the same settings every round): its step made once for the run, where recorded
    assert len(made) == (0 if name in NOT_RECORDED else 1), len(made)


@pytest.mark.parametrize("name", BLOCK_TABLES)
def test_fixed_blocks_of_one_size_are_kept_and_each_steps_blocks_loaded_by_the_loop(name, made, monkeypatch):
    """12 samples in 4 blocks of 3: the block table's step is kept for the run, and with the table never loading
    the blocks itself (as when its step is being recorded, so a replay reads only what the loop wrote before the
    step), every round's model is the one of a run that trains step by step."""
    from fedsuite.batched import stacking

    settings = {**THREE_ROUNDS, "losac-blocks": 4}
    monkeypatch.setattr(kept_steps, "ON_CPU", False)
    fresh = kit.run_algorithm(name, settings)
    monkeypatch.setattr(kept_steps, "ON_CPU", True)
    monkeypatch.setattr(stacking, "being_recorded", lambda tensor: True)
    kept = kit.run_algorithm(name, settings)
    assert len(made) == 1
    for a, b in zip(kept.rounds, fresh.rounds, strict=True):
        assert kit.identical(a.x, b.x), f"round {a.round}"


def test_a_kept_step_serves_every_later_round(made, monkeypatch):
    """SCAFFOLD (its c − c_i written into the kept rule every round): one step made for the run, replayed in rounds
    2 and 3 with their own values; with lr-decay each round is a kind of its own and makes its own."""
    calls = []
    real_run = StepOnCpu.run

    def counted_run(self, k, inputs, targets):
        calls.append(id(self))
        return real_run(self, k, inputs, targets)

    monkeypatch.setattr(StepOnCpu, "run", counted_run)
    kit.run_algorithm("scaffold", THREE_ROUNDS)
    assert len(made) == 1 and calls == [id(made[0])] * (3 * BASE["local-steps"])
    made.clear()
    decayed = kit.run_algorithm("scaffold", {**THREE_ROUNDS, "lr-decay": 0.9})
    assert len(made) == 3  # η_l is fixed in a recording: a new one per round
    monkeypatch.setattr(kept_steps, "ON_CPU", False)
    assert kit.identical(decayed.x, kit.run_algorithm("scaffold", {**THREE_ROUNDS, "lr-decay": 0.9}).x)


def test_chunks_of_one_size_share_a_kept_step(made, monkeypatch):
    """7 clients in chunks of 3, 2, 2: one kept step for 3 clients and one for 2, whose second chunk of a round
    writes its own values into the first's tensors."""
    settings = {**THREE_ROUNDS, "num-clients": 7, "clients-per-round": 7, "batch-chunk": 3}
    kept = kit.run_algorithm("scaffold", settings)
    assert len(made) == 2
    monkeypatch.setattr(kept_steps, "ON_CPU", False)
    assert kit.identical(kept.x, kit.run_algorithm("scaffold", settings).x)


def test_refill_writes_the_public_tensors_and_leaves_the_scratch():
    def rule(vector: torch.Tensor, v: torch.Tensor) -> UpdateRule:
        adam = AdamStep(v, 0.9, 0.99, 1e-8)
        return UpdateRule(clipped=(AddVector(vector, 1.0),), step=adam)

    target, source = rule(torch.zeros(2, 3), torch.zeros(2, 3)), rule(torch.ones(2, 3), torch.full((2, 3), 2.0))
    source.step.m.fill_(5.0)
    scratch = target.step._u
    vector = target.clipped[0].vector
    refill(target, source)
    assert target.clipped[0].vector is vector and torch.equal(vector, torch.ones(2, 3))  # in place, the same tensor
    adam = target.step
    assert torch.equal(adam.m, torch.full((2, 3), 5.0)) and torch.equal(adam.v, torch.full((2, 3), 2.0))
    assert adam._u is scratch


def test_only_steps_a_recording_takes_are_kept():
    """The stand-in follows the recording's own rule: a stage that changes between steps is never kept."""
    from fedsuite.local.adaptive import GradientSum

    changing = UpdateRule(after_step=(GradientSum(0.0),))
    assert not_replayable(changing, torch.device("cuda"), 5) is not None


def _kind(rule: UpdateRule, batch: int, lr: float = 0.1):
    settings = LocalSettings(lr, 5, 1, 8, 0.0, 0.0)
    inputs, targets = torch.zeros(4, batch, 3), torch.zeros(4, batch, dtype=torch.long)
    return group_key([rule], settings, inputs, targets, "module", "loss")


def test_a_kept_step_serves_only_the_minibatch_shape_it_was_recorded_with():
    """A client with fewer samples than batch-size draws smaller minibatches: a recording's buffers would not take
    them, so that group is a kind of its own."""
    rule = UpdateRule()
    assert _kind(rule, 8) == _kind(rule, 8)
    assert _kind(rule, 8)[0] != _kind(rule, 5)[0]
    assert _kind(rule, 8, lr=0.1)[0] == _kind(rule, 8, lr=0.05)[0]  # the kind; η_l beside it


def test_a_step_kept_for_a_new_learning_rate_replaces_the_old_one():
    """lr-decay: each round records anew, and the run holds one recording per kind of group, not one per round."""
    kept, rule = KeptSteps(), UpdateRule()
    old, new = (KeptStep(None, None, None, rule, None, None, None) for _ in range(2))
    kept.keep(_kind(rule, 8, lr=0.1), old)
    assert kept.get(_kind(rule, 8, lr=0.1)) is old and kept.get(_kind(rule, 8, lr=0.09)) is None
    kept.keep(_kind(rule, 8, lr=0.09), new)
    assert len(kept) == 1 and kept.get(_kind(rule, 8, lr=0.09)) is new and kept.get(_kind(rule, 8, lr=0.1)) is None
    kept.drop(_kind(rule, 8, lr=0.09))
    assert len(kept) == 0
