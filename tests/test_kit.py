"""fedsuite.testing.kit, the verification kit plug-in algorithms use, checked on built-ins: each check passes where the
claim holds and fails, naming why, where it does not."""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.config.run_config import resolve
from fedsuite.data import load_dataset
from fedsuite.registry import costs
from fedsuite.registry import known as registry
from fedsuite.registry.plugins import AlgorithmRegistry
from fedsuite.strategies.scaffold import Scaffold


def test_the_closed_form_optimum_is_the_generators():
    cfg = {**kit.PARTIAL, "num-clients": 4}
    np.testing.assert_allclose(kit.least_squares(cfg).x_star, load_dataset(resolve(cfg)).x_star, rtol=1e-10)


def test_a_run_returns_the_model_and_every_rounds_observation():
    run = kit.run_algorithm("fedavg", {"num-server-rounds": 3})
    assert [r.round for r in run.rounds] == [1, 2, 3]
    assert kit.identical(run.rounds[-1].x, run.x) and not kit.identical(run.rounds[0].x, run.x)
    errors = [r.row["relative_error"] for r in run.rounds]
    assert errors == sorted(errors, reverse=True)  # full-batch FedAvg on LSQ moves towards x* at first
    assert errors[-1] == pytest.approx(kit.least_squares().relative_error(run.x), rel=1e-5)


def test_a_reduction_that_holds_passes_and_one_that_does_not_names_the_round():
    kit.check_reduction("fedcm", "fedavg", a_keys={"fedcm-alpha": 1.0}, knob={"fedcm-alpha": 0.5})
    with pytest.raises(AssertionError, match="differ after round 1"):
        kit.check_reduction("fedcm", "fedavg", a_keys={"fedcm-alpha": 0.5})
    with pytest.raises(AssertionError, match="knob is inert"):
        kit.check_reduction("fedcm", "fedavg", a_keys={"fedcm-alpha": 1.0}, knob={"seed": 0})


def test_invariants_see_the_strategy_after_every_aggregation():
    seen = []

    def c_is_the_mean_of_the_client_c_i(strategy):
        c_i = [kit.client_vector(strategy, pid, "c_i") for pid in range(strategy.rule.num_clients)]
        assert np.abs(strategy.rule.c - np.mean(c_i, axis=0)).max() < 1e-6
        seen.append(np.abs(strategy.rule.c).max())

    kit.run_algorithm("scaffold", kit.PARTIAL, invariants=[c_is_the_mean_of_the_client_c_i])
    assert len(seen) == kit.PARTIAL["num-server-rounds"] and max(seen) > 1e-3

    def c_stays_zero(strategy):
        assert not strategy.rule.c.any(), "c moved"

    with pytest.raises(AssertionError, match="c_stays_zero fails after round 1: c moved"):
        kit.run_algorithm("scaffold", kit.PARTIAL, invariants=[c_stays_zero])


def test_checkpoint_round_trip_of_an_algorithm_with_server_and_client_state(tmp_path):
    kit.check_checkpoint_round_trip("scaffold", tmp_path)


def test_communication_is_the_declared(monkeypatch):
    assert kit.check_communication("scaffold") == (2, 2, 0)
    assert kit.check_communication("fadamet", {"sampling": "bernoulli", "participation": 0.5}) == (2, 1, 1)
    leaky = registry.Algorithm("leaky", "tests.test_kit:LeakyScaffold", "fedsuite.clients.scaffold:ScaffoldClient",
                               "", "")  # fmt: skip
    plugged = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=list)
    plugged.register(leaky)
    monkeypatch.setattr(registry, "ALGORITHMS", plugged)  # a registry of its own: this process's stays plain
    with pytest.raises(AssertionError, match=r"leaky round 1: 3\.0 d-vectors down per client, declared 2"):
        kit.check_communication("leaky")


class LeakyScaffold(Scaffold):
    """SCAFFOLD that sends an array it does not declare: the communication check must notice."""

    def downlink(self, server_round):
        return {"c": self.c, "undeclared": self.c}


@pytest.mark.parametrize("name", registry.ALGORITHMS.built_in)
def test_every_built_in_saves_changes_and_reads_back_its_declared_client_state(name):
    declared = tuple(spec.name for spec in costs.client_state(name) if spec.units)
    assert kit.check_client_state(name) == declared


# ---- x⁰ and the minibatch replay: what a plug-in's float64 reference needs -----------------------------------------
def fedavg_in_float64(cfg: dict, run: kit.KitRun, order=None) -> list[np.ndarray]:
    """FedAvg written in numpy from docs/algorithms/fedavg.md on the kit's federation: every sampled client takes K_i
    steps x ← x − η_l(∇F_i(x; ξ) + wd·x) on the minibatches `order` gives (default: the kit's replay), the server
    adds the cohort's mean displacement. Starts at the run's x⁰ and follows its cohorts; returns the model after
    every round."""
    lsq, order = kit.least_squares(cfg), order or kit.minibatch_order
    wd, x, models = float(cfg.get("weight-decay", 0.0)), run.x0.astype(np.float64), []
    for observed in run.rounds:
        lr = cfg["lr"] * cfg.get("lr-decay", 1.0) ** (observed.round - 1)
        displacements = []
        for pid in observed.cohort:
            a, b = lsq.clients[pid]
            local = x.copy()
            for batch in order(pid, observed.round, cfg):
                rows_a, rows_b = a[batch.rows], b[batch.rows]
                local -= lr * (rows_a.T @ (rows_a @ local - rows_b) / len(rows_b) + wd * local)
            displacements.append(local - x)
        x = x + np.mean(displacements, axis=0)
        models.append(x)
    return models


def relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("mode", [
    {"lr-decay": 0.9},  # K = 3 draws of B = 4 distinct rows a step
    {"local-steps": 0, "local-epochs": 2, "batch-size": 5},  # epoch mode, a partial last batch of 2
    {"local-batches": "blocks", "losac-blocks": 3},  # one fixed block a step
], ids=["steps", "epochs", "blocks"])  # fmt: skip
def test_a_float64_reference_on_the_replayed_minibatches_follows_the_run(mode):
    cfg = {**kit.PARTIAL, **mode}
    run = kit.run_algorithm("fedavg", cfg)
    reference = fedavg_in_float64(cfg, run)
    for observed, expected in zip(run.rounds, reference, strict=True):
        assert relative_gap(observed.x, expected) < 1e-5, observed.round
    assert relative_gap(run.x0, reference[-1]) > 1e-2  # it trained
    shifted = fedavg_in_float64(cfg, run, lambda pid, r, c: kit.minibatch_order(pid, r + 1, c))
    assert relative_gap(run.x, shifted[-1]) > 1e-4  # another round's order is visibly not the one the loop used


def test_x0_is_the_seeds_model_and_the_replay_names_the_clients_rows():
    from fedsuite.models.networks import initial_vector

    cfg = resolve(kit.PARTIAL)
    fed = load_dataset(cfg)
    run = kit.run_algorithm("fedavg", {**kit.PARTIAL, "num-server-rounds": 1})
    built = initial_vector("linear", fed.input_shape, 1, fed.task, cfg.seed).numpy()
    assert kit.identical(run.x0, built) and not kit.identical(run.x0, run.rounds[0].x)
    assert run.rounds[0].cohort and len(run.rounds[0].cohort) == kit.PARTIAL["clients-per-round"]
    a, b = kit.least_squares(kit.PARTIAL).clients[4]
    batches = kit.minibatch_order(4, 2, kit.PARTIAL)
    assert [batch.step for batch in batches] == [0, 1, 2] and {batch.block for batch in batches} == {None}
    for batch in batches:
        assert len(set(batch.rows)) == kit.PARTIAL["batch-size"]
        np.testing.assert_allclose(batch.inputs, a[batch.rows], rtol=1e-6)  # the float32 rows the client holds
        np.testing.assert_allclose(batch.targets, b[batch.rows], rtol=1e-6)
    assert [m.rows.tolist() for m in kit.minibatch_order(4, 2, kit.PARTIAL)] == [m.rows.tolist() for m in batches]
    full = kit.minibatch_order(0, 1, kit.LSQ)  # full-batch steps: every row, in order
    assert len(full) == kit.LSQ["local-steps"] and all(m.rows.tolist() == list(range(20)) for m in full)
    with pytest.raises(ValueError, match=r"partition=6: the run has clients 0\.\.5"):
        kit.minibatch_order(6, 1, kit.PARTIAL)


def test_with_random_crops_the_rows_are_those_the_augmented_minibatches_came_from(monkeypatch):
    """Image i is the constant i + 1: a crop with zero padding and a flip keep its largest pixel, which names the row
    each augmented sample came from; the crop draws come between the index draws, so the rows of every later step
    depend on the replay consuming them too."""
    import torch

    from fedsuite.local.loop import LocalData
    from fedsuite.node.holdings import ClientNode

    n = 12
    images = torch.arange(1.0, n + 1).reshape(n, 1, 1, 1).expand(n, 1, 6, 6).contiguous()
    monkeypatch.setattr(ClientNode, "data", property(lambda node: LocalData(images, torch.arange(n), crop_pad=2)))
    batches = kit.minibatch_order(1, 3, {**kit.PARTIAL, "local-steps": 4})
    assert len(batches) == 4
    for batch in batches:
        np.testing.assert_array_equal(batch.inputs.max(axis=(1, 2, 3)) - 1, batch.rows)
        np.testing.assert_array_equal(batch.targets, batch.rows)
    assert any((batch.inputs == 0).any() for batch in batches)  # the crops did move the images
