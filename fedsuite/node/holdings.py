"""What one client node holds: its partition id, its local data on the training device, its model.

Data and model are built once per process and reused (Flower calls client_fn for every message; Ray
actors live across rounds), so a message costs a copy of x into the model, not a rebuild. Models are
cached per thread: a model is mutable training state, and in-process runs train clients in threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from fedsuite.config.run_config import Config
from fedsuite.data import client_inputs, client_partition, client_test_rows, load_dataset
from fedsuite.data.holdout import local_splits
from fedsuite.data.shape_only import shape_only
from fedsuite.local.device import pick_device
from fedsuite.local.loop import LocalData
from fedsuite.models.networks import FlatModel, loss_function, seeded_model, seeded_start
from fedsuite.rules.declared import StateSpec
from fedsuite.state.plan import client_specs
from fedsuite.state.store import ClientState

_MODELS: dict[tuple, FlatModel] = {}
_LOCAL_DATA: OrderedDict[tuple, LocalData] = OrderedDict()
_LOCAL_DATA_SLOTS = 16
_CACHE_LOCK = threading.Lock()


@dataclass
class ClientNode:
    cfg: Config
    partition_id: int
    num_partitions: int
    data_dir: str | None = None  # the node's own files (deployment); None = partition of the run's dataset
    store: MutableMapping | None = None  # this partition's persistent client state (fedsuite.state.store)
    noise_secret: int = 0  # mixed into the seed of its DP noise shares (node config dp-noise-secret, docs/privacy.md)

    @cached_property
    def device(self) -> torch.device:
        return pick_device(self.cfg.run_control.device)

    @cached_property
    def dataset(self):
        return load_dataset(self.cfg, self.data_dir)

    @cached_property
    def shapes(self):
        """What the model is built for (input_shape, num_classes, task): the data's, or with server-data=false the
        run config's input-shape and num-classes, as the server builds it (a node's own labels may not show every
        class)."""
        if self.cfg.data.on_server:
            return self.dataset
        return shape_only(self.cfg.data.name, self.cfg.data.input_shape, self.cfg.data.num_classes)

    @property
    def loss_fn(self):
        return loss_function(self.shapes.task)

    @cached_property
    def data(self) -> LocalData:
        """The rows this client trains on: its local data less its held-out splits (fedsuite.data.holdout)."""
        return self._local()[0]

    @property
    def validation_data(self) -> LocalData | None:
        """Its validation share (validation-fraction > 0), else None."""
        return self._local()[1]

    @property
    def test_data(self) -> LocalData | None:
        """Its held-out test data (evaluation federated/both): its own test split where the data has one (a node's
        own data-dir, natural partitions with grouped test rows), else its local-test-fraction share; None when
        federated evaluation is off."""
        return self._local()[2]

    def _local(self) -> tuple[LocalData, LocalData | None, LocalData | None]:
        key = (self.partition_id, self.data_dir, str(self.device)) + tuple(sorted(self.cfg.items()))
        with _CACHE_LOCK:
            if key not in _LOCAL_DATA:
                _LOCAL_DATA[key] = self._build_local()
                while len(_LOCAL_DATA) > _LOCAL_DATA_SLOTS:
                    _LOCAL_DATA.popitem(last=False)
            _LOCAL_DATA.move_to_end(key)
            return _LOCAL_DATA[key]

    def _build_local(self) -> tuple[LocalData, LocalData | None, LocalData | None]:
        cfg, ds, device = self.cfg, self.dataset, self.device
        idx = None if self.data_dir else client_partition(cfg, ds)[self.partition_id]
        targets = ds.train.y if idx is None else ds.train.y[torch.as_tensor(idx, dtype=torch.long)]
        inputs = client_inputs(cfg, ds, idx, self.partition_id, str(device))  # FedMIM's colour perturbation
        own_test = client_test_rows(cfg, ds, self.partition_id, self.data_dir) if cfg.evaluation.federated else None
        evaluation = cfg.evaluation
        test_share = evaluation.local_test_fraction if evaluation.federated and own_test is None else 0.0
        splits = local_splits(len(targets), cfg.seed, self.partition_id, evaluation.validation_fraction, test_share)
        if not splits.holds_out:
            train = LocalData(inputs, targets.to(device), ds.crop_pad)  # exactly the partition: default runs unchanged
        else:
            train = _rows(inputs, targets, splits.train, device, ds.crop_pad)
        validation = _rows(inputs, targets, splits.validation, device) if evaluation.validation_fraction > 0 else None
        if own_test is not None:
            rows = torch.as_tensor(own_test, dtype=torch.long)
            test = LocalData(ds.features(ds.test, own_test, str(device)), ds.test.y[rows].to(device))
        else:
            test = _rows(inputs, targets, splits.test, device) if evaluation.federated else None
        return train, validation, test

    @property
    def model(self) -> FlatModel:
        """This thread's model for the run's architecture (never cached on the node: nodes cross threads). Built
        under the run seed, so frozen parameters are the server's and every other client's."""
        cfg, ds = self.cfg, self.shapes
        speed = (cfg.local.autocast, cfg.local.channels_last)
        key = (*self._model_key(), str(self.device), *speed, threading.get_ident())
        with _CACHE_LOCK:
            if key not in _MODELS:
                net = seeded_model(cfg.model, ds.input_shape, ds.num_classes, ds.task, cfg.seed, cfg.model_args)
                _MODELS[key] = FlatModel(net, self.device, *speed)
            return _MODELS[key]

    def _model_key(self) -> tuple:
        ds = self.shapes
        return (self.cfg.model, self.cfg.model_args, ds.input_shape, ds.num_classes, ds.task, self.cfg.seed)

    def initial_buffers(self) -> torch.Tensor:
        """The model's floating-point buffers at start (BatchNorm statistics; empty for buffer-free models), the
        same in every process: where buffers='local' clients start from before their first round."""
        return self._start()[1].to(self.device, copy=True)

    def state_of(self, client: type) -> ClientState | None:
        """The persistent vectors a client of class `client` keeps on this node, as the run's client-state plan puts
        them together (fedsuite.state.plan.client_specs: its declaration, the model's own, the stages'); None: none."""
        specs = client_specs(self.cfg, client)
        return self.client_state(specs) if specs else None

    def client_state(self, specs: Sequence[StateSpec]) -> ClientState:
        """This partition's declared persistent vectors (fedsuite.rules.declared), from the node's store."""
        if self.store is None:
            raise RuntimeError("this algorithm keeps client state but the node was built without a state store")
        return ClientState(self.store, self.model.dim, self.device, names=[spec.name for spec in specs])

    def initial_x(self) -> torch.Tensor:
        """x^0, made by the one function the server makes it with (fedsuite.models.networks.seeded_start), once per
        process (FedADMM's x̂_i and relaxed initialisation's x_i^last start there); a fresh copy each call."""
        return self._start()[0].to(self.device, copy=True)

    def _start(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(x^0, the initial buffers) of this run's model, as the server has them."""
        cfg, ds = self.cfg, self.shapes
        return seeded_start(cfg.model, ds.input_shape, ds.num_classes, ds.task, cfg.seed, cfg.model_args)

    def generator(self, server_round: int) -> torch.Generator:
        """Minibatch order and augmentation: a function of (seed, round, partition) only."""
        seed = np.random.SeedSequence([self.cfg.seed, server_round, self.partition_id]).generate_state(1)[0]
        return torch.Generator().manual_seed(int(seed))


def _rows(inputs: torch.Tensor, targets: torch.Tensor, positions: np.ndarray, device, crop_pad: int = 0) -> LocalData:
    """The local rows at `positions` as LocalData on `device`."""
    take = torch.as_tensor(positions, dtype=torch.long, device=inputs.device)
    return LocalData(inputs[take], targets.to(inputs.device)[take].to(device), crop_pad)
