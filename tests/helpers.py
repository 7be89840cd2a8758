"""Shared test fixtures: a small heterogeneous least-squares federation and an independent numpy reference."""

from __future__ import annotations

import numpy as np

from fedsuite.config.run_config import resolve
from fedsuite.data import load_dataset

LSQ = {
    "dataset": "synthetic-lsq",
    "num-clients": 5,
    "clients-per-round": 5,
    "synthetic-dim": 8,
    "synthetic-samples": 20,
    "synthetic-heterogeneity": 1.0,
    "batch-size": 0,
    "lr": 0.02,
    "local-steps": 1,
    "num-server-rounds": 10,
    "eval-every": 1000,
}


def lsq_clients(run_config: dict) -> tuple[list[tuple[np.ndarray, np.ndarray]], float]:
    """(A_i, b_i) per client in float64 and the weight decay, straight from the generator."""
    cfg = resolve(run_config)
    fed = load_dataset(cfg)
    return [(fed.features_x[p], fed.targets[p]) for p in fed.client_parts], float(cfg["weight-decay"])


def local_gd(a: np.ndarray, b: np.ndarray, x0: np.ndarray, lr: float, steps: int, wd: float, mu: float = 0.0):
    """K full-batch steps of x ← x − η(∇F_i(x) + μ(x − x0) + wd·x), F_i = (1/2n)‖Ax − b‖²."""
    x = x0.copy()
    for _ in range(steps):
        grad = a.T @ (a @ x - b) / len(b)
        x = x - lr * (grad + mu * (x - x0) + wd * x)
    return x


def one_client_of_a_2nn():
    """(the 2NN, 40 random Fashion-MNIST-shaped samples, x^0) under torch.manual_seed(0): one client's round against
    the FedSpeed authors' simulator's form (tests/test_fl_simulator_form.py, tests/test_fedsmoo_fedgamma.py). The
    global generator is left where the draws stop, so a test's next draws are its own and reproducible."""
    import copy

    import torch

    from fedsuite.local.loop import LocalData
    from fedsuite.models.networks import FlatModel, build_model

    torch.manual_seed(0)
    net = build_model("2nn", (1, 28, 28), 10, "classification")
    data = LocalData(torch.randn(40, 1, 28, 28), torch.randint(0, 10, (40,)))
    return net, data, FlatModel(copy.deepcopy(net)).x.detach().clone()
