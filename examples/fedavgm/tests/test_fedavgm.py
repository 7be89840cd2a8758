"""FedAvgM with Nesterov server momentum against fedsuite's verification kit (fedsuite.testing); run with this
package installed."""

import numpy as np
import pytest
from fedsuite import testing as kit
from fedsuite.rules.server_rule import Reply, RuleSettings
from fedsuite.server.sampling import Sampler

from fedavgm_plugin.strategy import FedAvgMNesterov

BETA = "fedavgm-nesterov-beta"


def test_two_aggregations_move_along_the_look_ahead():
    """v ← β v + mean Δ, x ← x + η_g (β v + mean Δ): written here in numpy, two rounds."""
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=5).astype(np.float32)
    beta, server_lr = 0.5, 0.8
    rule = FedAvgMNesterov(RuleSettings(x0, Sampler(3, "fixed", 3), lr=0.1), beta=beta, server_lr=server_lr)
    x, v = x0.astype(np.float64), np.zeros(5)
    for server_round in (1, 2):
        replies = [Reply(i, 10, 3, 0.1, {"delta": rng.normal(size=5).astype(np.float32)}) for i in range(3)]
        mean = np.mean([r.arrays["delta"] for r in replies], axis=0, dtype=np.float64)
        v = beta * v + mean
        x = x + server_lr * (beta * v + mean)
        rule.x = rule.aggregate(server_round, replies).astype(np.float32)
        np.testing.assert_allclose(rule.x, x, rtol=1e-6)


def test_ends_where_fedavg_and_fedavgm_do():
    cfg = {**kit.LSQ, "num-server-rounds": 60, "eval-every": 1000, BETA: 0.5, "fedavgm-beta": 0.5}
    lsq = kit.least_squares(cfg)
    nesterov, heavy_ball, plain = (kit.run_algorithm(a, cfg) for a in ("fedavgm-nesterov", "fedavgm", "fedavg"))
    assert not kit.identical(nesterov.rounds[1].x, heavy_ball.rounds[1].x)  # different paths …
    for run in (nesterov, heavy_ball):  # … one end: momentum does not remove client drift
        assert lsq.relative_error(run.x) == pytest.approx(lsq.relative_error(plain.x), rel=1e-5)
    assert lsq.relative_error(plain.x) > 1e-2  # FedAvg's drift bias


def test_beta_zero_is_fedavg_bit_for_bit():
    kit.check_reduction("fedavgm-nesterov", "fedavg", a_keys={BETA: 0.0}, knob={BETA: 0.9})


def test_checkpoint_round_trip(tmp_path):
    kit.check_checkpoint_round_trip("fedavgm-nesterov", tmp_path)


def test_communication_is_fedavgs():
    assert kit.check_communication("fedavgm-nesterov") == (1, 1, 0)
