"""Local momentum kept across rounds against fedsuite's verification kit (fedsuite.testing); run with this package
installed."""

import numpy as np
from fedsuite import testing as kit


def test_mu_zero_is_fedavg_bit_for_bit():
    kit.check_reduction("localmomentum", "fedavg", a_keys={"localmomentum-mu": 0.0}, knob={"localmomentum-mu": 0.5})


def test_the_buffer_is_client_state_saved_and_read_back():
    assert kit.check_client_state("localmomentum", {"localmomentum-mu": 0.5}) == ("m_i",)


def test_every_client_of_the_cohort_keeps_a_buffer():
    trained: set[int] = set()

    def cohort_buffers_are_set(strategy, server_round, cohort):
        for pid in cohort:
            assert np.any(kit.client_vector(strategy, pid, "m_i")), f"client {pid} has no buffer"
        trained.update(cohort)

    kit.run_algorithm("localmomentum", {**kit.PARTIAL, "localmomentum-mu": 0.5}, invariants=[cohort_buffers_are_set])
    assert len(trained) > kit.PARTIAL["clients-per-round"]  # more than one cohort was watched


def test_checkpoint_round_trip(tmp_path):
    kit.check_checkpoint_round_trip("localmomentum", tmp_path, {"localmomentum-mu": 0.5})


def test_communication_is_fedavgs():
    assert kit.check_communication("localmomentum") == (1, 1, 0)
