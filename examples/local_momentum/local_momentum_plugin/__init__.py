"""Local heavy-ball momentum kept across rounds, as a fedsuite plug-in: the registry entry, found through the
entry point `fedsuite.algorithms: localmomentum = local_momentum_plugin:algorithm` of this package's pyproject.toml.

The server is FedAvg's (fedsuite.strategies.fedavg); each client's step stage keeps a momentum buffer m_i that is
declared client state, so it survives between the client's rounds (client.py).
"""

from __future__ import annotations

from fedsuite.config.schema import Key
from fedsuite.config.tunable import LogRange
from fedsuite.registry.entry import Algorithm

MU = Key("localmomentum-mu", 0.9, "client momentum μ kept across rounds (plug-in examples/local_momentum)",
         low=0.0, high=0.99)  # fmt: skip


def algorithm() -> Algorithm:
    return Algorithm(
        name="localmomentum",
        strategy="fedsuite.strategies.fedavg:FedAvg",
        client="local_momentum_plugin.client:LocalMomentumClient",
        section="plug-in (examples/local_momentum)",
        summary="local SGD with heavy-ball momentum m_i ← μ m_i + d kept across the client's rounds",
        strategy_args={"server_lr": "server-lr"},
        client_args={"mu": MU.name},
        keys=(MU,),
        tunable={"lr": LogRange(0.005, 0.5), MU.name: (0.0, 0.5, 0.9)},
    )
