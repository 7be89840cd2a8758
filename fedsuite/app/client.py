"""The client half for a user's Flower app: a fedsuite algorithm's client on the user's module and data.

The algorithm's own client rule (the registry's, clients/) trains on an OwnNode (fedsuite.app.node) behind the
suite's adapter (fedsuite/node/client.py); OwnClient wraps it to check, before it trains, that the message is
for this node's partition and that the server runs with the same settings (a check that fails, like a failed fit,
becomes an error reply, which the server rejects and logs in one line; it never raises into Flower); it evaluates
on the user's test data with the algorithm client's own evaluate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from flwr.client import NumPyClient

from fedsuite.app.node import Data, OwnNode
from fedsuite.app.settings import SETTINGS_KEY, mismatch, run_config
from fedsuite.codec.payload import PARTITION_KEY
from fedsuite.config.run_config import ConfigError
from fedsuite.local.device import pick_device
from fedsuite.node.client import client_for
from fedsuite.state.plan import client_specs, state_plan

DEVICES = ("auto", "cpu", "cuda")
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class OwnClient(NumPyClient):
    """The algorithm's client for one partition, behind the checks a user's app needs (module docstring)."""

    def __init__(self, fed: NumPyClient, node: OwnNode):
        self.fed, self.node = fed, node

    def get_properties(self, config):
        return self.fed.get_properties(config)

    def get_parameters(self, config):
        return self.fed.get_parameters(config)

    def fit(self, parameters, config):
        problem = self._refusal(config)
        if problem is not None:
            return [], 0, {"partition-id": self.node.partition_id, "error": f"ValueError: {problem}", "traceback": ""}
        return self.fed.fit(parameters, config)

    def _refusal(self, config) -> str | None:
        sent = config.get(PARTITION_KEY)
        if sent is not None and int(sent) != self.node.partition_id:
            return (f"this node is partition {self.node.partition_id} but was sent partition {sent}: the server must "
                    "use client-mapping='fixed' (fedsuite.app.strategy does)")  # fmt: skip
        shared = config.get(SETTINGS_KEY)
        return None if shared is None else mismatch(str(shared), self.node.cfg)

    def evaluate(self, parameters, config):
        """The algorithm client's own evaluation (fedsuite/node/client.py) on the user's test data: (loss, examples,
        {accuracy for integer targets, partition-id}); without test data 0 examples and `empty`=1."""
        return self.fed.evaluate(parameters, config)


def client(algorithm: str, model: torch.nn.Module, train: Data, *, partition_id: int, num_partitions: int,
           test: Data | None = None, state_dir: str | Path | None = None, device: str | torch.device = "auto",
           loss_fn: Loss = F.cross_entropy, **settings: Any) -> OwnClient:  # fmt: skip
    """The NumPyClient of `algorithm` for one partition of a user's federation (call `.to_client()` in a client_fn).

    `model`: the user's nn.Module, built as on the server (same architecture; seed it, as FedADMM starts x̂_i at it
    and frozen parts are never sent); `train` / `test`: a DataLoader, a Dataset or a pair (inputs, targets) of
    tensors, materialised once onto `device` ('auto', 'cpu', 'cuda' or a torch.device); fedsuite's local loop draws
    the minibatches (`batch_size`, `local_epochs` or `local_steps` among the settings); `partition_id` /
    `num_partitions`: this SuperNode's place in the federation (Flower's node config); `state_dir`: the folder of
    this run's client state (one file per partition; needed by stateful algorithms such as SCAFFOLD and FedSpeed;
    use a fresh folder per run, e.g. named after the run id); `loss_fn(outputs, targets)`: the training loss;
    `settings`: run-config keys as keywords, the same as the server's strategy() gets (it checks them)."""
    partition_id, num_partitions = int(partition_id), int(num_partitions)
    if not 0 <= partition_id < num_partitions:
        raise ConfigError(f"partition_id={partition_id}: must be in 0..{num_partitions - 1} (num_partitions)")
    cfg = run_config(algorithm, settings)
    given = settings.get("num_clients", settings.get("num-clients"))
    if given is not None and int(given) != num_partitions:
        raise ConfigError(f"num_clients={given}: this client is one of num_partitions={num_partitions}; give both the "
                          "same number")  # fmt: skip
    specs = client_specs(cfg)
    if specs and state_dir is None:
        names = ", ".join(spec.name for spec in specs)
        raise ConfigError(f"state_dir: algorithm={algorithm!r} keeps client state ({names}) between rounds; give "
                          "client(..., state_dir=<a folder for this run's state>)")  # fmt: skip
    if not isinstance(device, torch.device) and device not in DEVICES:
        raise ConfigError(f"device={device!r}: allowed values are {', '.join(DEVICES)}, or a torch.device")
    where = device if isinstance(device, torch.device) else pick_device(device)
    node = OwnNode.build(cfg, partition_id, num_partitions, where, model, train, loss_fn, None, test)
    if specs:  # the state goes to the user's folder, in the tier the run's plan chooses (fedsuite.state.plan)
        plan = state_plan(cfg, node.model.dim, int(node.model.buffers.numel()))
        node.store = plan.open_store(Path(state_dir).expanduser(), partition_id)
    if test is not None:
        node.test_data  # noqa: B018 -- bad test data is refused here, before any training
    return OwnClient(client_for(cfg, node), node)
