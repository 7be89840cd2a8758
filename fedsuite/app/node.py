"""A client node made from a user's own module and data: what an algorithm's client (fedsuite/rules/client_rule.py and
its adapter, fedsuite/node/client.py) reads.

fedsuite's own ClientNode (fedsuite/node/holdings.py) builds its model and data from the run config; this one holds the
user's: their nn.Module (as a FlatModel on the training device), their training data materialised once onto that
device as one tensor pair (fedsuite's local loop draws the minibatches, under the same seeded generator as the suite),
their loss, and a client-state store in the folder they chose. Its seeding and client state are ClientNode's own
methods, so a client trains here exactly as it trains in the suite.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from fedsuite.config.run_config import Config
from fedsuite.local.loop import LocalData
from fedsuite.models.networks import FlatModel, start_vectors
from fedsuite.node.holdings import ClientNode

Data = DataLoader | Dataset | tuple[torch.Tensor, torch.Tensor]

_MATERIALISED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loader or dataset → {device: LocalData}


class DataError(ValueError):
    """The data given to fedsuite.app cannot be used (one line naming the argument)."""


@dataclass(frozen=True)
class OwnData:
    """What the client adapter reads of `node.dataset` (shapes for its messages, the task for evaluation)."""

    input_shape: tuple[int, ...]
    num_classes: int
    task: str  # "classification" for integer targets, else "regression"
    name: str = "own"
    crop_pad: int = 0


def materialise(data: Data, device: torch.device, argument: str = "train") -> LocalData:
    """`data` as one (inputs, targets) pair on `device`: a DataLoader is read once in order (its dataset with its
    batch size and collate function, never shuffled, so the run stays reproducible), a Dataset item by item, a pair
    of tensors as it is. Loaders and datasets are materialised once per device and process while they live."""
    try:
        cached = _MATERIALISED.get(data)
    except TypeError:  # a tuple: not weakly referenceable, and cheap anyway
        cached = None
    if cached is not None and str(device) in cached:
        return cached[str(device)]
    inputs, targets = _tensors(data, argument)
    if inputs.shape[0] != targets.shape[0] or inputs.shape[0] == 0:
        raise DataError(
            f"{argument}: {inputs.shape[0]} inputs and {targets.shape[0]} targets; need as many, at least 1"
        )
    local = LocalData(inputs.to(device), targets.to(device))
    if isinstance(data, DataLoader | Dataset):
        _MATERIALISED.setdefault(data, {})[str(device)] = local
    return local


def _tensors(data: Data, argument: str) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(data, tuple | list) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        return data[0], data[1]
    if isinstance(data, DataLoader):
        batch = data.batch_size or 1
        rows = data.dataset
        if data.batch_sampler is not None:  # the rows the loader yields (a sampler may pick a subset), in order
            rows = Subset(data.dataset, sorted(i for drawn in data.batch_sampler for i in drawn))
        data = DataLoader(rows, batch_size=batch, shuffle=False, collate_fn=data.collate_fn)
    elif isinstance(data, Dataset):
        data = DataLoader(data, batch_size=256, shuffle=False)
    else:
        raise DataError(f"{argument}: expected a DataLoader, a Dataset or a pair (inputs, targets) of tensors, not "
                        f"{type(data).__name__}")  # fmt: skip
    inputs, targets = [], []
    for batch in data:
        if not (isinstance(batch, tuple | list) and len(batch) == 2):
            raise DataError(f"{argument}: each batch must be a pair (inputs, targets); got {type(batch).__name__}")
        inputs.append(torch.as_tensor(batch[0]))
        targets.append(torch.as_tensor(batch[1]))
    if not inputs:
        raise DataError(f"{argument}: the data is empty")
    return torch.cat(inputs), torch.cat(targets)


def describe(data: LocalData) -> OwnData:
    targets = data.targets
    if targets.dtype.is_floating_point:
        return OwnData(tuple(data.inputs.shape[1:]), 1, "regression")
    return OwnData(tuple(data.inputs.shape[1:]), int(targets.max()) + 1, "classification")


@dataclass
class OwnNode:
    """The node an algorithm's client reads (fedsuite/node/holdings.py ClientNode's interface), made of the user's
    pieces."""

    cfg: Config
    partition_id: int
    num_partitions: int
    device: torch.device
    model: FlatModel
    data: LocalData
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    store: MutableMapping | None = None
    test: Data | None = None  # the user's test data, materialised when first evaluated on
    validation_data = None  # no validation share: the user holds out what they like

    def __post_init__(self):
        self.dataset = self.shapes = describe(self.data)  # the client adapter reads both names
        # before any training: the model as the user built it, taken as the server takes its x^0
        self._x0, self._buffers0 = start_vectors(self.model.module)

    @classmethod
    def build(cls, cfg: Config, partition_id: int, num_partitions: int, device: torch.device, module: torch.nn.Module,
              train: Data, loss_fn, store: MutableMapping | None, test: Data | None = None) -> OwnNode:  # fmt: skip
        flat = FlatModel(module, device, cfg.local.autocast, cfg.local.channels_last)
        return cls(cfg, partition_id, num_partitions, device, flat, materialise(train, device), loss_fn, store, test)

    @property
    def test_data(self) -> LocalData | None:
        """The user's test data on the training device (what the client adapter's evaluate evaluates on), or None."""
        return None if self.test is None else materialise(self.test, self.device, "test")

    def initial_x(self) -> torch.Tensor:
        """x^0 as the user's module held it when the client was made (FedADMM's x̂_i starts there): build the model
        the same way on the server and on every client (seeded), as the server's x^0 is its model's parameters."""
        return self._x0.to(self.device, copy=True)

    def initial_buffers(self) -> torch.Tensor:
        return self._buffers0.to(self.device, copy=True)

    # the suite's own seeding and client state, unchanged: (seed, round, partition) → minibatch order
    generator = ClientNode.generator
    client_state = ClientNode.client_state
    state_of = ClientNode.state_of


def evaluation_copy(module: torch.nn.Module) -> FlatModel:
    """A separate copy of `module` as a FlatModel on its own device, for evaluating other parameters."""
    net = copy.deepcopy(module)
    params = list(net.parameters())
    device = params[0].device if params else torch.device("cpu")
    return FlatModel(net, device)
