"""FedAdam / FedYogi / FedAdagrad server steps against values computed by hand (docs/algorithms/fedadam.md)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsuite.rules.server_rule import Reply, RuleSettings
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.sampling import Sampler
from fedsuite.strategies.fedopt import FedAdagrad, FedAdam, FedYogi
from tests.helpers import LSQ

X0 = np.array([1.0, 2.0], np.float32)
DELTA_1 = np.array([0.5, -1.0])
DELTA_2 = np.array([0.1, 0.2])


def strategy(cls, lr_decay: float = 1.0):
    settings = RuleSettings(initial_x=X0, sampler=Sampler(1, "fixed", 1), lr=0.1, lr_decay=lr_decay)
    return cls(settings, server_lr=0.1, beta1=0.9, beta2=0.99, tau=0.01)


def step(s, delta, server_round):
    s.x = s.aggregate(server_round, [Reply(0, 10, 1, 0.1, {"delta": delta})]).astype(np.float32)
    return s.x


# Round 1, Δ = (0.5, −1): m = 0.1·Δ = (0.05, −0.1).
#   Adam/Yogi (v starts at 0): v = 0.01·Δ² = (0.0025, 0.01), √v = (0.05, 0.1)
#       x = (1, 2) + 0.1·(0.05/0.06, −0.1/0.11) = (1.0833333, 1.9090909)
#   Adagrad: v = Δ² = (0.25, 1), x = (1, 2) + 0.1·(0.05/0.51, −0.1/1.01) = (1.0098039, 1.9900990)
# Round 2, Δ' = (0.1, 0.2), Δ'² = (0.01, 0.04): m = 0.9·m + 0.1·Δ' = (0.055, −0.07)
#   Adam:    v = 0.99·(0.0025, 0.01) + 0.01·Δ'² = (0.002575, 0.0103)
#   Yogi:    v − Δ'² < 0 ⇒ v = v + 0.01·Δ'² = (0.0026, 0.0104)
#   Adagrad: v = (0.26, 1.04)
ROUND_1 = {FedAdam: [1.0833333, 1.9090909], FedYogi: [1.0833333, 1.9090909], FedAdagrad: [1.0098039, 1.9900990]}
V_2 = {FedAdam: [0.002575, 0.0103], FedYogi: [0.0026, 0.0104], FedAdagrad: [0.26, 1.04]}


@pytest.mark.parametrize("cls", [FedAdam, FedYogi, FedAdagrad])
def test_two_server_steps_match_hand_computation(cls):
    s = strategy(cls)
    np.testing.assert_allclose(step(s, DELTA_1, 1), ROUND_1[cls], rtol=1e-6)
    x1 = s.x.astype(np.float64)
    step(s, DELTA_2, 2)
    np.testing.assert_allclose(s.v, V_2[cls], rtol=1e-9)
    np.testing.assert_allclose(s.m, [0.055, -0.07], rtol=1e-9)
    expected = x1 + 0.1 * np.array([0.055, -0.07]) / (np.sqrt(V_2[cls]) + 0.01)
    np.testing.assert_allclose(s.x, expected, rtol=1e-6)


def test_no_bias_correction_and_server_lr_not_decayed():
    """With bias correction the first Adam step would be η·Δ/(|Δ|+τ·…) ≈ η·sign(Δ); the paper's is 0.1× that."""
    s = strategy(FedAdam, lr_decay=0.5)  # decays the client lr only
    x1 = step(s, DELTA_1, 1) - X0
    x2 = step(s, DELTA_1, 2) - X0 - x1
    assert abs(x1[0] - 0.0833333) < 1e-6 and x2[0] > x1[0]  # momentum builds up; η_g untouched by γ


def test_fedadam_runs_in_the_suite_and_differs_from_fedavg():
    cfg = {**LSQ, "num-server-rounds": 3, "local-steps": 3}
    adam = run_inprocess({**cfg, "algorithm": "fedadam"})
    avg = run_inprocess({**cfg, "algorithm": "fedavg"})
    assert np.all(np.isfinite(adam.x)) and np.abs(adam.x - avg.x).max() > 1e-3
