"""A run's config: `resolve(run_config)` merges Flower's run config over the schema's defaults and returns a
`Config`, or raises one `ConfigError` that lists every bad key with what is allowed.

The keys come from the schema of this process (fedsuite/registry/known.py `active_schema`: the common keys of
fedsuite/config/schema.py plus each registered algorithm's own keys, built-ins and plug-ins alike), and each algorithm's
own checks run after every key passed its check. The schema is the only place a default is written:
pyproject.toml's `[tool.flwr.app.config]` table (where Flower reads them) is generated from the built-ins' schema
(`python -m fedsuite.config --write-pyproject`), the run-config reference page docs/reference/run-config.md too
(simulation.algorithms).
A `Config` also carries typed settings objects (`cfg.local`, `cfg.evaluation`, …) for the groups the code reads.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsuite.config.import_paths import is_import_path
from fedsuite.config.presets import apply_preset, preset_error
from fedsuite.config.schema import (
    BINARY_LABEL_DATASETS,
    COLOUR_DATASETS,
    DATA_FORMATS,
    DATASET_MODELS,
    DATASETS,
    MODELS,
    PLUGIN_CONFIG,
    ConfigError,
    Key,  # noqa: F401  (plug-ins declare their keys as fedsuite.config.run_config.Key)
    Scalar,
    float_list,
    int_list,
    parse_pairs,
    similar_keys,
)
from fedsuite.config.settings import Settings, setting, value_of
from fedsuite.privacy.secagg import SecAggSettings
from fedsuite.privacy.settings import ClientPrivacy, SampleLevelPrivacy
from fedsuite.registry.known import ALGORITHMS as ALGORITHMS_REGISTRY
from fedsuite.registry.known import BUILT_IN_SCHEMA, active_schema, algorithm_errors
from fedsuite.results.folder import run_name_problem
from fedsuite.server.pruning import PruneSettings, parse_marks
from fedsuite.systems.checks import system_errors
from fedsuite.systems.model import SystemModel

SCHEMA = BUILT_IN_SCHEMA  # the built-ins' schema (fedsuite/registry/known.py); a run resolves against active_schema()
ALGORITHMS = ALGORITHMS_REGISTRY.built_in  # the built-in algorithm names, in the registry's order


# --- typed settings: the groups of keys the code reads together, built once per Config ---------------------------
# (fedsuite/config/settings.py says how a group reads its keys and their schema defaults)


@dataclass(frozen=True)
class DataSource(Settings):
    """Which dataset a node loads and how (fedsuite/data).

    name (dataset): the dataset, one of DATASETS.
    data_dir (data-dir): folder with its files; '' = the dataset's default location.
    download (download): may torchvision download a missing dataset.
    label_transform (label-transform): 'none' or 'binary' (docs/reference/protocol.md, Label transforms).
    colour_perturbation (colour-perturbation): FedMIM's per-client brightness/saturation shift.
    image_size (image-size): imagefolder: the side images are resized to.
    label_column (label-column): table/hf: the label column.
    feature_column (feature-column): hf: the feature column ('' = every numeric column but label and partition).
    partition_column (partition-column): partition='natural': the column whose values are the clients.
    on_server (server-data): the server holds the dataset; False = only the nodes do.
    input_shape (input-shape): server-data=false: one sample's shape ('3,32,32' → (3, 32, 32)); () when unset.
    num_classes (num-classes): server-data=false: number of classes (1 = regression); 0 when unset.
    """

    name: str = setting("dataset")
    data_dir: str = setting("data-dir")
    download: bool = setting("download")
    label_transform: str = setting("label-transform")
    colour_perturbation: bool = setting("colour-perturbation")
    image_size: int = setting("image-size")
    label_column: str = setting("label-column")
    feature_column: str = setting("feature-column")
    partition_column: str = setting("partition-column")
    on_server: bool = setting("server-data")
    input_shape: tuple[int, ...] = setting("input-shape", parse=int_list)
    num_classes: int = setting("num-classes")


@dataclass(frozen=True)
class SyntheticData(Settings):
    """The synthetic federations' generator arguments (fedsuite/data/synthetic.py).

    num_clients (num-clients): N, one generated client per partition.
    samples (synthetic-samples): samples per client.
    dim (synthetic-dim): d of synthetic-lsq / synthetic-logistic.
    heterogeneity (synthetic-heterogeneity): spread of client optima and feature scales.
    noise (synthetic-noise): label noise std.
    weight_decay (weight-decay): the coupled L2 the closed-form optimum includes.
    seed (seed): run seed.
    lowrank_size (lowrank-size): synthetic-lowrank: side of the square matrix X.
    lowrank_rank (lowrank-rank): synthetic-lowrank: rank r of the ground truth.
    """

    num_clients: int = setting("num-clients")
    samples: int = setting("synthetic-samples")
    dim: int = setting("synthetic-dim")
    heterogeneity: float = setting("synthetic-heterogeneity")
    noise: float = setting("synthetic-noise")
    weight_decay: float = setting("weight-decay")
    seed: int = setting("seed")
    lowrank_size: int = setting("lowrank-size")
    lowrank_rank: int = setting("lowrank-rank")


@dataclass(frozen=True)
class Partitioning(Settings):
    """How the training data is split across clients (docs/reference/protocol.md, Partitions;
    fedsuite/data/partition.py).

    scheme (partition): 'iid', 'dirichlet', 'shards' or 'mixture'.
    num_clients (num-clients): N, the number of partitions.
    seed (seed): run seed.
    alpha (partition-alpha): Dirichlet concentration α.
    balanced (partition-balanced): Dirichlet with equal client sizes.
    mixture (partition-mixture): c of the c % mixture partition.
    """

    scheme: str = setting("partition")
    num_clients: int = setting("num-clients")
    seed: int = setting("seed")
    alpha: float = setting("partition-alpha")
    balanced: bool = setting("partition-balanced")
    mixture: float = setting("partition-mixture")


@dataclass(frozen=True)
class ClientSampling(Settings):
    """Which clients take part in a round (docs/reference/protocol.md, Client sampling; fedsuite/server/sampling.py's
    Sampler).

    mode (sampling): 'fixed' (S clients without replacement) or 'bernoulli' (each with probability p).
    num_clients (num-clients): N, the clients to draw from.
    clients_per_round (clients-per-round): S for mode 'fixed'.
    participation (participation): p for mode 'bernoulli'.
    seed (seed): run seed.
    """

    mode: str = setting("sampling")
    num_clients: int = setting("num-clients")
    clients_per_round: int = setting("clients-per-round")
    participation: float = setting("participation")
    seed: int = setting("seed")


@dataclass(frozen=True)
class LocalLoop(Settings):
    """How a client trains in one round (fedsuite/local/loop.py's train_local, fedsuite/node/client.py,
    fedsuite/node/holdings.py).

    epochs (local-epochs): E, local epochs, used when steps = 0.
    steps (local-steps): K, fixed local steps per round; 0 = epoch mode.
    work (local-work): 'equal', 'uniform' or 'per-round': whose K_i the server's system model sends
        (fedsuite/systems/work.py; the largest is local-steps).
    steps_min (local-steps-min): the smallest K_i of local-work 'uniform' / 'per-round'; 0 = unset.
    batch_size (batch-size): B; 0 = the full local batch.
    lr (lr): η_l^0, the local learning rate of round 1.
    lr_decay (lr-decay): γ, η_l in round t (counted from 1) is η_l^0 γ^(t−1).
    weight_decay (weight-decay): coupled L2 added to every local step.
    clip_norm (clip-norm): clip each step's gradient to this L2 norm; 0 = off.
    clip_scope (clip-scope): 'clean' or 'reference', what clip_norm clips (docs/algorithms/index.md).
    relaxed_init (relaxed-init): β of relaxed initialisation, 0 = off (docs/running/relaxed-init.md).
    local_batches (local-batches): 'minibatch' (B samples) or 'blocks' (one of the client's fixed blocks).
    blocks (losac-blocks): M, the fixed data blocks per client for local_batches = 'blocks'.
    loss_reduction (loss-reduction): 'mean' or 'sum' over a minibatch or block.
    client_threads (client-threads): torch threads per client process.
    autocast (autocast): 'none' (float32) or 'bf16' forward pass.
    channels_last (channels-last): 4-D inputs in NHWC memory order.
    """

    epochs: int = setting("local-epochs")
    steps: int = setting("local-steps")
    work: str = setting("local-work")
    steps_min: int = setting("local-steps-min")
    batch_size: int = setting("batch-size")
    lr: float = setting("lr")
    lr_decay: float = setting("lr-decay")
    weight_decay: float = setting("weight-decay")
    clip_norm: float = setting("clip-norm")
    clip_scope: str = setting("clip-scope")
    relaxed_init: float = setting("relaxed-init")
    local_batches: str = setting("local-batches")
    blocks: int = setting("losac-blocks")
    loss_reduction: str = setting("loss-reduction")
    client_threads: int = setting("client-threads")
    autocast: str = setting("autocast")
    channels_last: bool = setting("channels-last")


@dataclass(frozen=True)
class Aggregation(Settings):
    """How the server combines the cohort's replies (strategies/*).

    server_lr (server-lr): η_g of the averaging algorithms (1 = plain averaging).
    weighting (weighting): 'uniform' or 'samples', the weights over the cohort.
    agg_scale (agg-scale): 'mean' (η_g·mean_S Δ_i) or '1/N' (η_g·Σ_S Δ_i / N, docs/algorithms/losac.md).
    """

    server_lr: float = setting("server-lr")
    weighting: str = setting("weighting")
    agg_scale: str = setting("agg-scale")


@dataclass(frozen=True)
class Evaluation(Settings):
    """Who evaluates the global model, on what, and when (fedsuite/evaluation/metrics.py, the clients' evaluate).

    eval_every (eval-every): evaluate every r rounds (the last round always).
    eval_batch_size (eval-batch-size): batch size of the evaluation passes.
    targets (targets): the accuracy targets for rounds-to-target, parsed ('0.7,0.8' → (0.7, 0.8)).
    mode (evaluation): 'central', 'federated' or 'both'.
    eval_clients (eval-clients): clients evaluating per round; 0 = the round's cohort.
    local_test_fraction (local-test-fraction): a client's held-out test share when its data has no test split.
    validation_fraction (validation-fraction): each client's held-out validation share; 0.0 = no validation split.
    target_metric (target-metric): the accuracy rounds-to-target reads, 'auto' resolved (see `target_column`).
    """

    eval_every: int = setting("eval-every")
    eval_batch_size: int = setting("eval-batch-size")
    targets: tuple[float, ...] = setting("targets", parse=float_list)
    mode: str = setting("evaluation")
    eval_clients: int = setting("eval-clients")
    local_test_fraction: float = setting("local-test-fraction")
    validation_fraction: float = setting("validation-fraction")
    target_metric: str = setting("target-metric")

    @property
    def central(self) -> bool:
        return self.mode in ("central", "both")

    @property
    def federated(self) -> bool:
        return self.mode in ("federated", "both")

    @property
    def target_column(self) -> str:
        """The rounds.jsonl column rounds-to-target reads: accuracy, fed_accuracy, val_accuracy, fed_val_accuracy."""
        metric = self.target_metric
        if metric == "auto":
            metric = "fed-accuracy" if self.mode == "federated" else "accuracy"
        return metric.replace("-", "_")


@dataclass(frozen=True)
class RunControl(Settings):
    """How long a run goes, where it computes and when it stops early (fedsuite/server/app.py).

    num_rounds (num-server-rounds): T.
    min_replies (min-replies): share of a round's cohort that must reply validly, else the run fails.
    round_timeout (round-timeout): seconds a round waits for a reply; 0.0 = no limit (Flower's None).
    divergence_factor (divergence-factor): stop as diverged above this multiple of the initial test loss (or of
        the cohort's first train loss).
    checkpoint_every (checkpoint-every): checkpoint every r rounds and after the last; 0 = never.
    resume_from (resume-from): results folder to continue; '' = a fresh run.
    client_mapping (client-mapping): 'logical' or 'fixed' (one SuperNode per partition).
    device (device): 'auto', 'cpu' or 'cuda'.
    reuse_host_memory (reuse-host-memory): keep freed large host buffers in the process (fedsuite/state/host_memory.py).
    """

    num_rounds: int = setting("num-server-rounds")
    min_replies: float = setting("min-replies")
    round_timeout: float = setting("round-timeout")
    divergence_factor: float = setting("divergence-factor")
    checkpoint_every: int = setting("checkpoint-every")
    resume_from: str = setting("resume-from")
    client_mapping: str = setting("client-mapping")
    device: str = setting("device")
    reuse_host_memory: bool = setting("reuse-host-memory")


@dataclass(frozen=True)
class Output(Settings):
    """Where the results go (fedsuite/results/folder.py).

    out_dir (out-dir): results root; a relative path starts at the current directory of simulation.run (of the
        SuperLink under a plain flwr run).
    run_name (run-name): results sub-folder; '' = <algorithm>-<dataset>-<timestamp>-<random>.
    overwrite (overwrite): replace an earlier run's results in that folder.
    tensorboard (tensorboard): also write TensorBoard event files.
    wandb_mode (wandb-mode): 'off', 'offline' or 'online' Weights & Biases logging.
    wandb_project (wandb-project): the W&B project.
    """

    out_dir: str = setting("out-dir")
    run_name: str = setting("run-name")
    overwrite: bool = setting("overwrite")
    tensorboard: bool = setting("tensorboard")
    wandb_mode: str = setting("wandb-mode")
    wandb_project: str = setting("wandb-project")


@dataclass(frozen=True)
class ClientStateSettings(Settings):
    """Where persistent client state lives (fedsuite/state/store.py).

    mode (client-state): 'auto' (memory while it fits budget_mb), 'memory' or 'disk'.
    budget_mb (client-state-budget-mb): memory budget for all clients' state, MiB.
    dir (client-state-dir): folder for on-disk state; '' = a per-run temp folder.
    """

    mode: str = setting("client-state")
    budget_mb: float = setting("client-state-budget-mb")
    dir: str = setting("client-state-dir")


@dataclass(frozen=True)
class Batching(Settings):
    """Cohort batching: a round's clients trained as one computation (docs/running/batched.md; fedsuite/batched).

    clients (batch-clients): train each round's clients with the same K_i, minibatch sizes and rule stacked.
    messages (batch-messages): under flwr run, how many nodes a round's share messages go to.
    cuda_graphs (cuda-graphs): on a CUDA device, record a group's step once as a CUDA graph and replay it.
    """

    clients: bool = setting("batch-clients")
    messages: int = setting("batch-messages")
    cuda_graphs: bool = setting("cuda-graphs")


class Config(Mapping):
    """A validated, read-only run config (string keys as in pyproject.toml), with typed views of it.

    `cfg["lr"]` reads one key; the typed settings objects group what the code reads together: `cfg.data`,
    `cfg.synthetic`, `cfg.partitioning`, `cfg.sampling`, `cfg.local`, `cfg.aggregation`, `cfg.privacy`,
    `cfg.evaluation`, `cfg.run_control`, `cfg.output`, `cfg.client_state`, `cfg.sample_privacy`, `cfg.secagg`,
    `cfg.pruning`, `cfg.batching` and the system models `cfg.systems` (fedsuite/systems); `cfg.algorithm`,
    `cfg.dataset`, `cfg.preset`, `cfg.num_clients`, `cfg.seed` and `cfg.model` are the run's identity. Everything is
    built once, here.
    """

    def __init__(self, values: Mapping[str, Scalar], explicit: frozenset[str] = frozenset()):
        self._values = dict(values)
        self.explicit = explicit  # keys the run config gave with a value other than the default
        v = self._values
        self._data = DataSource.from_values(v)
        self._synthetic = SyntheticData.from_values(v)
        self._partitioning = Partitioning.from_values(v)
        self._sampling = ClientSampling.from_values(v)
        self._local = LocalLoop.from_values(v)
        self._aggregation = Aggregation.from_values(v)
        self._privacy = ClientPrivacy.from_values(v)
        self._evaluation = Evaluation.from_values(v)
        self._run_control = RunControl.from_values(v)
        self._output = Output.from_values(v)
        self._client_state = ClientStateSettings.from_values(v)
        self._sample_privacy = SampleLevelPrivacy.from_values(v)
        self._secagg = SecAggSettings.from_values(v)
        self._pruning = PruneSettings.from_values(v)
        self._batching = Batching.from_values(v)
        self._systems = SystemModel.from_run_config(v)

    def __getitem__(self, key: str) -> Scalar:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"

    @property
    def data(self) -> DataSource:
        return self._data

    @property
    def synthetic(self) -> SyntheticData:
        return self._synthetic

    @property
    def partitioning(self) -> Partitioning:
        return self._partitioning

    @property
    def sampling(self) -> ClientSampling:
        return self._sampling

    @property
    def local(self) -> LocalLoop:
        return self._local

    @property
    def aggregation(self) -> Aggregation:
        return self._aggregation

    @property
    def privacy(self) -> ClientPrivacy:
        return self._privacy

    @property
    def evaluation(self) -> Evaluation:
        return self._evaluation

    @property
    def run_control(self) -> RunControl:
        return self._run_control

    @property
    def output(self) -> Output:
        return self._output

    @property
    def client_state(self) -> ClientStateSettings:
        return self._client_state

    @property
    def sample_privacy(self) -> SampleLevelPrivacy:
        return self._sample_privacy

    @property
    def secagg(self) -> SecAggSettings:
        return self._secagg

    @property
    def pruning(self) -> PruneSettings:
        return self._pruning

    @property
    def batching(self) -> Batching:
        return self._batching

    @property
    def systems(self) -> SystemModel:
        """The system models (local work, drop-outs, deadline, availability) of this run."""
        return self._systems

    @property
    def algorithm(self) -> str:
        return str(self._values["algorithm"])

    @property
    def dataset(self) -> str:
        return self._data.name

    @property
    def preset(self) -> str:
        """The preset's name; '' = none."""
        return str(self._values["preset"])

    @property
    def num_clients(self) -> int:
        """N, number of clients (partitions)."""
        return int(self._values["num-clients"])

    @property
    def seed(self) -> int:
        return int(self._values["seed"])

    @property
    def model(self) -> str:
        """The model name (resolves model='auto' for built-in datasets; own data resolves it from its shape)."""
        name = str(self._values["model"])
        return DATASET_MODELS[self.dataset][0] if name == "auto" and self.dataset in DATASET_MODELS else name

    @property
    def model_args(self) -> str:
        """`model-args`, the factory's further keyword arguments as a TOML inline table ('' = none)."""
        return str(self._values["model-args"])

    @property
    def buffers(self) -> str:
        """'average' or 'local': what happens to the model's buffers (BatchNorm statistics)."""
        return str(self._values["buffers"])

    @property
    def targets(self) -> list[float]:
        return list(self._evaluation.targets)

    @property
    def is_synthetic(self) -> bool:
        return self.dataset.startswith("synthetic-")


def resolve(run_config: Mapping[str, Any] | None = None) -> Config:
    """Defaults overlaid with `run_config` (its `preset` expanded first unless `preset-expanded`), every key
    checked; raises ConfigError listing all problems."""
    run_config = dict(run_config or {})
    errors: list[str] = []
    if (err := preset_error(value_of(run_config, "preset"))) is not None:
        errors.append(err)
    elif not value_of(run_config, "preset-expanded"):
        run_config, _ = apply_preset(run_config)
    run_config = unpack_plugin_config(run_config, errors)
    values: dict[str, Scalar] = {}
    schema = active_schema()
    for name in sorted(set(run_config) - set(schema)):
        close = similar_keys(name, schema)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        errors.append(f"{name}: unknown key{hint}")
    for name, key in schema.items():
        value, err = key.check(run_config.get(name, key.default))
        if err:
            errors.append(err)
        else:
            values[name] = value
    errors += _cross_checks(values)
    if errors:
        raise ConfigError("invalid run config:\n  " + "\n  ".join(errors))
    explicit = frozenset(k for k in run_config if k in schema and run_config[k] != schema[k].default)
    return Config(values, explicit)


_RESOLVED: dict[tuple, Config] = {}  # run config (and the registry it was resolved against) → its Config
_RESOLVED_SLOTS = 16
_RESOLVED_LOCK = threading.Lock()


def run_configsetting(run_config: Mapping[str, Any]) -> tuple | None:
    """What a resolved run config depends on: its keys, values and their types (1, 1.0 and True resolve
    differently) and the algorithms registered in this process (their keys and checks); None when a value cannot be
    a key (not hashable)."""
    try:
        given = tuple(sorted((str(k), type(v).__name__, v) for k, v in run_config.items()))
        key = (given, tuple((name, id(algorithm)) for name, algorithm in ALGORITHMS_REGISTRY.items()))
        hash(key)
    except TypeError:
        return None
    return key


def resolve_cached(run_config: Mapping[str, Any] | None = None) -> Config:
    """`resolve(run_config)`, the same read-only Config again for an equal run config: a node resolves the run config
    of every message it gets, and it is the same for the whole run. A run config that fails is resolved (and
    refused) again each time."""
    key = run_configsetting(run_config or {})
    if key is None:
        return resolve(run_config)
    with _RESOLVED_LOCK:
        found = _RESOLVED.get(key)
    if found is not None:
        return found
    cfg = resolve(run_config)
    with _RESOLVED_LOCK:
        _RESOLVED[key] = cfg
        while len(_RESOLVED) > _RESOLVED_SLOTS:
            _RESOLVED.pop(next(iter(_RESOLVED)))
    return cfg


def unpack_plugin_config(run_config: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    """`run_config` with the pairs of `plugin-config` beside the other keys and `plugin-config` emptied (its keys
    now stand on their own, so a resolved config resolves again to itself). A pair that names a built-in key, or a
    key also given directly with another value, is an error."""
    packed = value_of(run_config, PLUGIN_CONFIG)
    if not isinstance(packed, str) or not packed.strip():
        return run_config
    try:
        pairs = parse_pairs(packed)
    except ValueError as err:
        errors.append(f"{PLUGIN_CONFIG}={packed!r}: {err}; write \"key=value key2='text'\"")
        return {**run_config, PLUGIN_CONFIG: ""}
    for key, value in pairs.items():
        if key in SCHEMA:
            errors.append(f"{PLUGIN_CONFIG}: {key!r} is a built-in key; give it directly, not in {PLUGIN_CONFIG}")
        elif key in run_config and run_config[key] != value:
            errors.append(f"{PLUGIN_CONFIG}: {key!r} is also given directly ({run_config[key]!r} and {value!r})")
    return {**run_config, **pairs, PLUGIN_CONFIG: ""}


def with_num_clients(cfg: Config, num_clients: int, why: str) -> Config:
    """`cfg` with num-clients set by the data (partition='natural'); an explicit different value is an error."""
    if cfg.num_clients == num_clients:
        return cfg
    if "num-clients" in cfg.explicit:
        raise ConfigError(f"num-clients={cfg.num_clients}: {why} makes {num_clients} clients; leave num-clients out "
                          f"or set it to {num_clients}")  # fmt: skip
    new = resolve({**dict(cfg), "num-clients": num_clients, "preset-expanded": True})  # the preset is applied
    return Config({**dict(new), "preset-expanded": cfg["preset-expanded"]}, cfg.explicit)


def _model_and_data_errors(v: dict[str, Scalar]) -> list[str]:
    """Names that are neither built-in nor an import path; natural partitions and their column."""
    errors = []
    if "dataset" in v and v["dataset"] not in DATASETS + DATA_FORMATS and not is_import_path(str(v["dataset"])):
        errors.append(f"dataset={v['dataset']!r}: allowed values are {', '.join(DATASETS + DATA_FORMATS)}, or "
                      "'package.module:loader'")  # fmt: skip
    if "model" in v and v["model"] not in MODELS and not is_import_path(str(v["model"])):
        errors.append(f"model={v['model']!r}: allowed values are {', '.join(MODELS)}, or 'package.module:factory'")
    if "model-args" in v and str(v["model-args"]).strip():
        import tomllib

        try:
            tomllib.loads(f"args = {v['model-args']}")["args"].items()
        except (tomllib.TOMLDecodeError, AttributeError) as err:
            errors.append(f"model-args={v['model-args']!r}: expected a TOML inline table such as '{{width=64}}' "
                          f"({err})")  # fmt: skip
    if v.get("partition") == "natural":
        if not str(value_of(v, "partition-column")).strip():
            errors.append("partition='natural': give partition-column=<the column whose values are the clients>")
        if str(value_of(v, "dataset")).startswith("synthetic-"):
            errors.append("partition='natural': the synthetic federations bring their own clients")
    return errors


def _evaluation_errors(v: dict[str, Scalar]) -> list[str]:
    """Who can evaluate what: a server without data cannot evaluate centrally; targets need their metric."""
    errors = []
    if v.get("server-data") is False:
        if v.get("evaluation") in ("central", "both"):
            errors.append(f"evaluation={v['evaluation']!r} needs a test set on the server, but server-data=false: "
                          "use evaluation='federated'")  # fmt: skip
        if "input-shape" in v:
            try:
                shape = int_list(str(v["input-shape"]))
                if not shape or min(shape) < 1:
                    raise ValueError
            except ValueError:
                errors.append(f"input-shape={v['input-shape']!r}: server-data=false needs one sample's shape as "
                              "positive comma-separated integers, such as '8' or '3,32,32'")  # fmt: skip
        if v.get("num-classes") == 0:
            errors.append("num-classes=0: server-data=false needs the number of classes (1 = regression)")
        if str(value_of(v, "dataset")).startswith("synthetic-"):
            errors.append("server-data=false: the synthetic federations are generated on the server too")
    metric = v.get("target-metric")
    if metric in ("accuracy", "val-accuracy") and v.get("evaluation") == "federated":
        errors.append(f"target-metric={metric!r} is a central metric, but evaluation='federated': allowed are auto, "
                      "fed-accuracy, fed-val-accuracy")  # fmt: skip
    if metric in ("fed-accuracy", "fed-val-accuracy") and v.get("evaluation") == "central":
        errors.append(f"target-metric={metric!r} is a federated metric, but evaluation='central': allowed are auto, "
                      "accuracy, val-accuracy")  # fmt: skip
    if metric in ("val-accuracy", "fed-val-accuracy") and v.get("validation-fraction") == 0.0:
        errors.append(f"target-metric={metric!r} needs a validation split: set validation-fraction > 0")
    if str(value_of(v, "prune-at")).strip():
        try:
            parse_marks(str(v["prune-at"]))
        except ValueError as err:
            errors.append(f"prune-at={v['prune-at']!r}: {err}; write 'round:value' pairs such as '20:0.5,40:0.6'")
        score = str(value_of(v, "prune-score"))
        if v.get("validation-fraction") == 0.0:
            errors.append(f"prune-at needs a validation split (prune-score={score!r}): set validation-fraction > 0")
        federated = score.startswith("fed_")
        if v.get("evaluation") == ("central" if federated else "federated"):
            errors.append(f"prune-score={score!r} is never written with evaluation={v['evaluation']!r}: allowed are "
                          f"{'val_accuracy, val_loss' if federated else 'fed_val_accuracy, fed_val_loss'}")  # fmt: skip
        try:
            last = max(parse_marks(str(v["prune-at"])), default=0)
        except ValueError:
            last = 0
        if "num-server-rounds" in v and last >= int(v["num-server-rounds"]):
            errors.append(f"prune-at: a mark at round {last} is not before the last round (num-server-rounds="
                          f"{v['num-server-rounds']}), where it would call a finished run pruned")  # fmt: skip
    return errors


def _cross_checks(v: dict[str, Scalar]) -> list[str]:
    """Checks that relate keys; each runs only when the keys it reads passed their own checks."""
    errors = _model_and_data_errors(v) + _evaluation_errors(v)
    fits = DATASET_MODELS.get(str(v.get("dataset")), ())
    builtin_model = v.get("model") in MODELS
    if (
        builtin_model
        and "dataset" in v
        and v["dataset"] in DATASETS
        and v["model"] != "auto"
        and v["model"] not in fits
    ):
        errors.append(
            f"model={v['model']!r} does not fit dataset={v['dataset']!r}: allowed are auto, {', '.join(fits)}"
        )
    if v.get("label-transform") == "binary" and "dataset" in v and v["dataset"] not in BINARY_LABEL_DATASETS:
        errors.append(
            f"label-transform='binary' is not defined for dataset={v['dataset']!r}: allowed datasets are "
            f"{', '.join(BINARY_LABEL_DATASETS)}; use label-transform='none'"
        )
    if v.get("colour-perturbation") is True and "dataset" in v and v["dataset"] not in COLOUR_DATASETS:
        errors.append(
            f"colour-perturbation=true is defined for 3-channel images only: allowed datasets are "
            f"{', '.join(COLOUR_DATASETS)}, not dataset={v['dataset']!r}"
        )
    has = all(k in v for k in ("sampling", "clients-per-round", "num-clients"))
    if has and v["sampling"] == "fixed" and int(v["clients-per-round"]) > int(v["num-clients"]):
        errors.append(f"clients-per-round={v['clients-per-round']}: must be <= num-clients={v['num-clients']} (S <= N)")
    if "algorithm" in v:  # the algorithm's own rules live in its registry entry
        errors += algorithm_errors(v)
    if v.get("agg-scale") == "1/N" and v.get("weighting") == "samples":
        errors.append("agg-scale='1/N' is the uniform sum Σ_S Δ_i / N; use weighting='uniform' with it")
    errors += system_errors(v)  # local work, deadline, availability, and client-level DP with them
    if "run-name" in v and (problem := run_name_problem(str(v["run-name"]))) is not None:
        errors.append(problem)  # one folder inside out-dir: nothing is written or removed outside it
    if "lowrank-rank" in v and "lowrank-size" in v and int(v["lowrank-rank"]) > int(v["lowrank-size"]):
        errors.append(f"lowrank-rank={v['lowrank-rank']}: must be <= lowrank-size={v['lowrank-size']}")
    try:
        targets = [float(t) for t in str(value_of(v, "targets")).split(",") if t.strip()]
        if any(not 0.0 <= t <= 1.0 for t in targets):
            errors.append(f"targets={v['targets']!r}: each target must be an accuracy in [0, 1]")
    except ValueError:
        errors.append(f"targets={v['targets']!r}: expected comma-separated numbers such as '0.7,0.8'")
    return errors


# --- pyproject.toml's [tool.flwr.app.config] table, generated from the schema -----------------------------------

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
PYPROJECT_BEGIN = "# BEGIN run-config defaults"
PYPROJECT_END = "# END run-config defaults"
WRITE_COMMAND = "python -m fedsuite.config --write-pyproject"


def toml_value(value: Scalar) -> str:
    """`value` as a TOML literal that reads back as the same Python value and type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    return repr(value)  # int, or a finite float (repr keeps the '.0' or the exponent)


def pyproject_config_block() -> str:
    """The run-config table, with the markers and the comment that say where it comes from."""
    lines = [
        f"{PYPROJECT_BEGIN}: every key with its default, generated from the built-ins' schema",
        "# (fedsuite/config/schema.py and fedsuite/registry/builtin.py, where defaults are written)",
        f"# by `{WRITE_COMMAND}`; do not edit by hand.",
        "# Flower reads the defaults from here; tests/test_config.py fails when this table and the schema differ.",
        "[tool.flwr.app.config]",
        *(f"{key.name} = {toml_value(key.default)}" for key in SCHEMA.values()),
        PYPROJECT_END,
    ]
    return "\n".join(lines)


def with_generated_config_table(pyproject_text: str) -> str:
    """`pyproject_text` with the block between the markers replaced by `pyproject_config_block()`; the rest of the
    text is kept byte for byte. Raises ConfigError when the markers are missing."""
    pattern = re.compile(f"^{re.escape(PYPROJECT_BEGIN)}.*?^{re.escape(PYPROJECT_END)}$", re.S | re.M)
    if len(pattern.findall(pyproject_text)) != 1:
        raise ConfigError(f"pyproject.toml needs one '{PYPROJECT_BEGIN}' … '{PYPROJECT_END}' block around its "
                          "[tool.flwr.app.config] table")  # fmt: skip
    return pattern.sub(lambda _: pyproject_config_block(), pyproject_text)


def pyproject_is_current(path: Path = PYPROJECT) -> bool:
    """Whether the table in `path` is exactly what the schema generates."""
    text = path.read_text()
    return with_generated_config_table(text) == text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pyproject.toml's [tool.flwr.app.config] table from the schema")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write-pyproject", action="store_true", help="rewrite the table in pyproject.toml")
    action.add_argument("--check-pyproject", action="store_true", help="exit 1 when the table is out of date")
    args = parser.parse_args(argv)
    if args.write_pyproject:
        PYPROJECT.write_text(with_generated_config_table(PYPROJECT.read_text()))
    elif args.check_pyproject:
        if not pyproject_is_current(PYPROJECT):
            print("pyproject.toml's run-config table differs from the schema; run: " + WRITE_COMMAND)
            return 1
    else:
        print(pyproject_config_block())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
