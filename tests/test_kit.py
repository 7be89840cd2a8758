"""fedsuite.testing, the verification kit plug-in algorithms use, checked on built-ins: each check passes where the
claim holds and fails, naming why, where it does not."""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite import costs, registry
from fedsuite import testing as kit
from fedsuite.config import resolve
from fedsuite.data import load_dataset
from fedsuite.plugins import AlgorithmRegistry
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
