"""fedsuite's algorithms inside your own Flower app: the stable import surface.

    from fedsuite import app as fedsuite_app

    # ServerApp: server_fn(context)
    strategy = fedsuite_app.strategy("scaffold", Net(), num_clients=10, clients_per_round=5, lr=0.05,
                                     evaluate=my_evaluate, results="results/run-1")
    return fedsuite_app.server_components(strategy)

    # ClientApp: client_fn(context)
    return fedsuite_app.client("scaffold", Net(), trainloader, test=testloader, partition_id=pid,
                               num_partitions=10, state_dir=f"/tmp/state/run-{context.run_id}",
                               clients_per_round=5, lr=0.05).to_client()

Stable names (kept across versions; everything else in fedsuite.app.* is internal):
- strategy(algorithm, model, *, evaluate=None, results=None, observers=(), **settings) → a Flower Strategy
- server_components(strategy) → the ServerAppComponents for a server_fn (rounds, timeout, fedsuite's round loop)
- client(algorithm, model, train, *, partition_id, num_partitions, test=None, state_dir=None, device='auto',
  loss_fn=F.cross_entropy, **settings) → a Flower NumPyClient
- allowed_keys() → the settings both take; ConfigError, DataError: what bad input raises (one line naming it)

Both halves run fedsuite's own code: the server rule of strategies/ inside fedsuite.server.adapter.RuleStrategy, the
algorithm's client class of clients/ on fedsuite's shared local loop, so a run equals the suite's run of the same
algorithm, model and data. Where state lives: the global model and the algorithm's server state (SCAFFOLD's c,
FedSpeed's duals …) in the strategy object, in the ServerApp's process; each client's persistent vectors (c_i, ĝ_i
…) in `state_dir`, one file per partition (`partition-<id>.state`), written atomically after each fit; never in
Flower's Context.
"""

from fedsuite.app.client import client
from fedsuite.app.node import DataError
from fedsuite.app.server import server_components, strategy
from fedsuite.app.settings import allowed_keys
from fedsuite.config.run_config import ConfigError

__all__ = ["ConfigError", "DataError", "allowed_keys", "client", "server_components", "strategy"]
