"""FedAvgM (Hsu et al. 2019, server momentum) as a fedsuite plug-in: the registry entry, found through the
entry point `fedsuite.algorithms: fedavgm = fedavgm_plugin:algorithm` of this package's pyproject.toml.

Clients run FedAvg's local SGD (fedsuite.clients.fedavg); the server keeps a momentum v (strategy.py).
"""

from __future__ import annotations

from fedsuite.registry import Algorithm
from fedsuite.tunable import LogRange

from fedavgm_plugin.keys import BETA


def algorithm() -> Algorithm:
    return Algorithm(
        name="fedavgm",
        strategy="fedavgm_plugin.strategy:FedAvgM",
        client="fedsuite.clients.fedavg:FedAvgClient",
        section="plug-in (examples/fedavgm)",
        summary="server momentum: v ← β v + mean_S Δ_i, x ← x + η_g v",
        strategy_args={"beta": BETA.name, "server_lr": "server-lr"},
        keys=(BETA,),
        tunable={"lr": LogRange(0.005, 0.5), BETA.name: (0.0, 0.5, 0.7, 0.9)},  # what simulation.tune searches
    )
