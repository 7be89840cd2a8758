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


def test_local_momentum_written_in_numpy_follows_the_run():
    """m_i ← μ m_i + ∇F_i(x; ξ) + wd·x and x ← x − η_l m_i on the minibatches the kit replays, m_i kept across the
    client's rounds, FedAvg's server: float64 numpy from the run's x⁰ and cohorts, equal to float rounding."""
    mu = 0.5
    cfg = {**kit.PARTIAL, "localmomentum-mu": mu}
    run = kit.run_algorithm("localmomentum", cfg)
    lsq, lr, wd = kit.least_squares(cfg), cfg["lr"], cfg["weight-decay"]
    x, buffers = run.x0.astype(np.float64), {}
    for observed in run.rounds:
        displacements = []
        for pid in observed.cohort:
            a, b = lsq.clients[pid]
            local, m = x.copy(), buffers.get(pid, np.zeros_like(x))
            for batch in kit.minibatch_order(pid, observed.round, cfg):
                rows_a, rows_b = a[batch.rows], b[batch.rows]
                m = mu * m + rows_a.T @ (rows_a @ local - rows_b) / len(rows_b) + wd * local
                local = local - lr * m
            buffers[pid] = m
            displacements.append(local - x)
        x = x + np.mean(displacements, axis=0)
        assert np.linalg.norm(observed.x - x) <= 1e-5 * np.linalg.norm(x), observed.round
    assert np.linalg.norm(x - run.x0) > 1e-2 * np.linalg.norm(x)  # it trained
