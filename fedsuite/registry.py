"""Algorithm name → (server half, client half, which run-config keys feed which constructor argument).

Strategy and client classes are imported only when an algorithm is built, so config validation stays
light. README's algorithm table is generated from this table (`python -m simulation.algorithms`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from fedsuite.config import Config


@dataclass(frozen=True)
class Algorithm:
    name: str
    strategy: str  # "module:Class"
    client: str
    section: str  # ALGORITHMS.md section
    summary: str
    strategy_args: dict[str, str] = field(default_factory=dict)  # constructor kwarg -> run-config key
    client_args: dict[str, str] = field(default_factory=dict)


_FEDOPT_ARGS = {"server_lr": "fedopt-lr", "beta1": "fedopt-beta1", "beta2": "fedopt-beta2", "tau": "fedopt-tau"}

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("fedavg", "strategies.fedavg:FedAvg", "clients.fedavg:FedAvgClient", "§4.1",
                  "local SGD, server averages displacements", {"server_lr": "server-lr"}),
        Algorithm("fedprox", "strategies.fedavg:FedAvg", "clients.fedprox:FedProxClient", "§4.2",
                  "FedAvg + client prox term μ(x − x^t)", {"server_lr": "server-lr"}, {"mu": "prox-mu"}),
        Algorithm("fedadam", "strategies.fedopt:FedAdam", "clients.fedavg:FedAvgClient", "§4.3",
                  "server Adam on mean displacement, no bias correction", _FEDOPT_ARGS),
        Algorithm("fedyogi", "strategies.fedopt:FedYogi", "clients.fedavg:FedAvgClient", "§4.3",
                  "server Yogi on mean displacement", _FEDOPT_ARGS),
        Algorithm("fedadagrad", "strategies.fedopt:FedAdagrad", "clients.fedavg:FedAvgClient", "§4.3",
                  "server Adagrad on mean displacement", _FEDOPT_ARGS),
    )
}  # fmt: skip


def _load(path: str):
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)


def build_strategy(cfg: Config, plan):
    algo = ALGORITHMS[str(cfg["algorithm"])]
    return _load(algo.strategy)(plan, **{arg: cfg[key] for arg, key in algo.strategy_args.items()})


def build_client(cfg: Config, node):
    algo = ALGORITHMS[str(cfg["algorithm"])]
    return _load(algo.client)(node, **{arg: cfg[key] for arg, key in algo.client_args.items()})
