"""The typed settings groups of a run's `Config`: the keys the code reads together, built once per Config
(`cfg.data`, `cfg.local`, `cfg.evaluation`, …; fedsuite/config/run_config.py builds them). Each field names its
run-config key and defaults to the schema's value; fedsuite/config/settings.py says how a group reads its keys.
The privacy, SecAgg, pruning and system-model groups live beside the code that reads them (fedsuite/privacy,
fedsuite/server/pruning.py, fedsuite/systems).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsuite.config.keys import float_list, int_list
from fedsuite.config.settings import Settings, setting, value_of


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
    chunk (batch-chunk): the most clients one stacked computation trains (0 = the memory plan chooses).
    """

    clients: bool = setting("batch-clients")
    messages: int = setting("batch-messages")
    cuda_graphs: bool = setting("cuda-graphs")
    chunk: int = setting("batch-chunk")


@dataclass(frozen=True)
class Compression(Settings):
    """Compressed uplinks and downlinks (docs/running/compression.md; fedsuite/compression).

    uplink (compress-up): the compressor of every uploaded vector ('none': no compression stage at all).
    k (compress-up-k): top-k / random-k: coordinates kept per uploaded vector (0 = unset).
    levels (compress-up-levels): QSGD's quantization levels s.
    feedback (compress-feedback): 'none', 'ef' (classic error feedback) or 'ef21'.
    mask (compress-up-mask): random-k's coordinates, 'own' per client or 'common' to a round's clients.
    downlink (compress-down): the compressor of the broadcast vectors' change ('none': no downlink stage at all).
    down_k (compress-down-k): its top-k / random-k coordinates per broadcast vector (0 = unset).
    """

    uplink: str = setting("compress-up")
    k: int = setting("compress-up-k")
    levels: int = setting("compress-up-levels")
    feedback: str = setting("compress-feedback")
    mask: str = setting("compress-up-mask")
    downlink: str = setting("compress-down")
    down_k: int = setting("compress-down-k")

    @property
    def on(self) -> bool:
        """Whether uploads are compressed (a compression stage on both sides)."""
        return self.uplink != "none"


def uplink_compressor(values) -> str:
    """The uplink compressor of run-config `values` (compress-up; a quantized baseline such as FedPAQ has its own
    default, its registry entry's key_defaults)."""
    return str(value_of(values, "compress-up"))
