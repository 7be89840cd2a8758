"""FedAvgM against fedsuite's verification kit (fedsuite.testing); run with this package installed."""

import pytest
from fedsuite import testing as kit


def test_reaches_the_optimum_only_as_fedavg_does():
    cfg = {**kit.LSQ, "num-server-rounds": 50, "eval-every": 1000, "fedavgm-beta": 0.5}  # β = 0.5: settles in 50
    lsq, momentum, plain = kit.least_squares(cfg), kit.run_algorithm("fedavgm", cfg), kit.run_algorithm("fedavg", cfg)
    assert not kit.identical(momentum.rounds[1].x, plain.rounds[1].x)  # different paths …
    assert lsq.relative_error(momentum.x) == pytest.approx(lsq.relative_error(plain.x), rel=1e-6)  # … one end
    assert lsq.relative_error(plain.x) > 1e-2  # FedAvg's drift bias: server momentum does not remove client drift


def test_beta_zero_is_fedavg_bit_for_bit():
    kit.check_reduction("fedavgm", "fedavg", a_keys={"fedavgm-beta": 0.0}, knob={"fedavgm-beta": 0.9})


def test_checkpoint_round_trip(tmp_path):
    kit.check_checkpoint_round_trip("fedavgm", tmp_path)


def test_communication_is_fedavgs():
    assert kit.check_communication("fedavgm") == (1, 1, 0)
