"""FedAvgM with Nesterov server momentum as a fedsuite plug-in that extends a built-in algorithm: the registry entry,
found through the entry point `fedsuite.algorithms: fedavgm-nesterov = fedavgm_plugin:algorithm` of this package's
pyproject.toml.

Clients run FedAvg's local SGD (fedsuite.clients.fedavg); the server rule subclasses the built-in FedAvgM
(fedsuite.strategies.fedavgm) and changes only the direction it moves along (strategy.py).
"""

from __future__ import annotations

from fedsuite.config.tunable import LogRange
from fedsuite.registry.entry import Algorithm

from fedavgm_plugin.keys import BETA


def algorithm() -> Algorithm:
    return Algorithm(
        name="fedavgm-nesterov",
        strategy="fedavgm_plugin.strategy:FedAvgMNesterov",
        client="fedsuite.clients.fedavg:FedAvgClient",
        section="plug-in (examples/fedavgm)",
        summary="Nesterov server momentum: v ← β v + mean_S Δ_i, x ← x + η_g (β v + mean_S Δ_i)",
        strategy_args={"beta": BETA.name, "server_lr": "server-lr"},
        keys=(BETA,),
        tunable={"lr": LogRange(0.005, 0.5), BETA.name: (0.0, 0.5, 0.7, 0.9)},  # what simulation.tune searches
    )
