"""The run-config schema the suite shares, knowing no algorithm: the keys every run has (`COMMON_KEYS`), the
built-in dataset and model names, and the answers fedsuite.app gives for the keys it refuses. What a key is (`Key`)
and the parsers the keys use are in fedsuite/config/keys.py, whose names this module hands on too.

Algorithms bring their own keys in their registry entry (fedsuite/registry/builtin.py for the built-ins, a
plug-in's `Algorithm(keys=...)` for the others); fedsuite/registry/known.py's `active_schema()` is these keys plus
theirs, with the registered names as `algorithm`'s allowed values, and fedsuite/config/run_config.py resolves a run
config against it.
Nothing here imports torch, Flower or a fedsuite module outside fedsuite/config/keys.py.
"""

from __future__ import annotations

from fedsuite.config.keys import (  # noqa: F401  (handed on: importers read them from here)
    ConfigError,
    Key,
    Scalar,
    default_refusal,
    float_list,
    int_list,
    parse_pairs,
    similar_keys,
)

PLUGIN_CONFIG = "plugin-config"  # the one key through which plug-in algorithms' keys pass Flower's run config
MAX_ROUNDS = 100_000  # a run keeps every round's row and rewrites its summary from them each round

DATASETS = (
    "fashion-mnist",
    "mnist",
    "cifar10",
    "cifar100",
    "tinyimagenet",
    "har",
    "esr",
    "synthetic-lsq",
    "synthetic-logistic",
    "synthetic-lowrank",
)
MODELS = ("auto", "cnn", "2nn", "logreg", "resnet18-gn", "linear", "matrix")
# Own data in a standard layout (fedsuite/data/own.py); any other own data is `dataset='package.module:loader'`.
DATA_FORMATS = ("imagefolder", "table", "hf")
COMPRESSORS = ("none", "topk", "randk", "qsgd", "sign")  # fedsuite/compression/registry.py's names
DOWNLINK_COMPRESSORS = ("none", "topk", "randk", "sign")  # contractive ones: the downlink's accumulator needs one
PARTITIONS = ("iid", "dirichlet", "shards", "mixture", "natural")
BUFFERS = ("average", "local")
EVALUATIONS = ("central", "federated", "both")
TARGET_METRICS = ("auto", "accuracy", "fed-accuracy", "val-accuracy", "fed-val-accuracy")
PRUNE_SCORES = ("val_accuracy", "val_loss", "fed_val_accuracy", "fed_val_loss")  # what prune-at may read
LABEL_TRANSFORMS = ("none", "binary")
# Datasets with a binary label rule (docs/reference/protocol.md, Label transforms; the rules: fedsuite/data/labels.py).
BINARY_LABEL_DATASETS = ("mnist", "fashion-mnist", "har", "esr")
# 3-channel image datasets: where FedMIM's colour perturbation (brightness, saturation) is defined.
COLOUR_DATASETS = ("cifar10", "cifar100", "tinyimagenet")

# Which models fit which dataset; the first is what model="auto" picks.
DATASET_MODELS: dict[str, tuple[str, ...]] = {
    "fashion-mnist": ("cnn", "2nn", "logreg", "resnet18-gn"),
    "mnist": ("cnn", "2nn", "logreg", "resnet18-gn"),
    "cifar10": ("resnet18-gn", "cnn", "logreg"),
    "cifar100": ("resnet18-gn", "cnn", "logreg"),
    "tinyimagenet": ("resnet18-gn", "cnn", "logreg"),
    "har": ("2nn", "logreg"),  # LoSAC's 2NN on 561 features
    "esr": ("2nn", "logreg"),  # LoSAC's 2NN on 178 features
    "synthetic-lsq": ("linear",),
    "synthetic-logistic": ("logreg",),
    "synthetic-lowrank": ("matrix",),
}

# What fedsuite.app offers instead of a key it refuses (Key.app), for the keys that share an answer
APP_OWN_DATA = "your app brings its own data and model"
APP_RESULTS = "use strategy(results=...)"
APP_TRACKING = "pass round observers with strategy(observers=...)"
APP_STATE = "use client(state_dir=...)"
APP_CHECKPOINT = "fedsuite.app runs do not checkpoint"
APP_SECAGG = "fedsuite.app aggregates in the clear; SecAgg+ runs in the suite's own apps"

COMMON_KEYS: tuple[Key, ...] = (
    Key("algorithm", "fedavg", "federated optimiser (see the algorithm table)",
        app="give it as the first argument of strategy() and client()", tunable=False),
    Key("dataset", "fashion-mnist", "training data: a built-in name, imagefolder / table / hf (own files in data-dir), "
        "or 'package.module:loader' (docs/own/data.md)", app=APP_OWN_DATA),
    Key("data-dir", "", "folder with the dataset files; empty = the dataset's default location",
        resumable=True, app=APP_OWN_DATA),
    Key("download", False, "allow torchvision to download a missing dataset (needs a network)",
        resumable=True, app=APP_OWN_DATA),
    Key("label-transform", "none", "none = the dataset's classes; binary = the LoSAC studies' 2-class "
        "relabelling (mnist ≤ 5, fashion-mnist ≤ 4, har ≤ 3 → 0, else 1; esr is binary either way; "
        "docs/reference/protocol.md)",
        LABEL_TRANSFORMS, app=APP_OWN_DATA),
    Key("preset", "", "named bundle of run-config keys for a seed's main table (docs/running/presets.md); "
        "empty = none. Keys given explicitly win; under a bare `flwr run` a key counts as explicit only when it "
        "differs from its default", app=APP_OWN_DATA, tunable=False),
    Key("preset-expanded", False, "set by simulation.run/compare: the run config already holds the preset's "
        "values with the -c keys applied, so the apps do not apply the preset again", app=APP_OWN_DATA, tunable=False),
    Key(PLUGIN_CONFIG, "", "plug-in algorithms' own keys as key=value pairs with TOML values, e.g. "
        "\"fedavgm-nesterov-beta=0.9\": `flwr run` accepts only the keys of pyproject.toml's table, so a plug-in's "
        "keys travel in this one (simulation.run packs them itself); resolved, they stand beside the built-in keys "
        "(docs/own/algorithm.md)", resumable=True),
    Key("model", "auto", "network: a built-in name or 'package.module:factory' (docs/own/model.md); auto = the "
        "dataset's default (first in DATASET_MODELS; own data: cnn for images, else 2nn)", app=APP_OWN_DATA),
    Key("model-args", "", "further keyword arguments of the model factory, a TOML inline table such as '{width=64}'",
        app=APP_OWN_DATA),
    Key("buffers", "average", "model buffers (BatchNorm statistics): average = the cohort's, weighted as the model, "
        "beside every algorithm; local = each client keeps its own (FedBN)", BUFFERS, client=True),
    Key("image-size", 32, "dataset='imagefolder': images are resized to image-size × image-size", low=1,
        app=APP_OWN_DATA),
    Key("label-column", "label", "dataset='table' / 'hf': the label column", app=APP_OWN_DATA),
    Key("feature-column", "", "dataset='hf': the feature column (empty: every numeric column but the label)",
        app=APP_OWN_DATA),
    Key("partition-column", "", "partition='natural': the column (table/hf) whose values are the clients; an own "
        "loader returns it among its `columns`", app=APP_OWN_DATA),
    Key("colour-perturbation", False, "FedMIM's per-client colour shift: client i draws b_i, s_i ~ U[0.6, 1.4] "
        "from (seed, partition) and applies adjust_brightness(b_i), then adjust_saturation(s_i) to its training "
        "images; test set untouched; 3-channel image datasets only", app=APP_OWN_DATA),
    Key("num-clients", 100, "N, number of clients (partitions); any number of SuperNodes trains them", low=1),
    Key("client-mapping", "logical", "logical = each message names its partition and any SuperNode trains it (the "
        "number of SuperNodes is a parallelism setting); fixed = one SuperNode per partition, tied to it by its "
        "--node-config partition-id (deployment)", ("logical", "fixed"),
        resumable=True, app="each SuperNode is its own partition (client-mapping='fixed')"),
    Key("partition", "dirichlet", "how training data is split across clients (docs/reference/protocol.md); natural "
        "= one client per value of partition-column (num-clients comes from the data)", PARTITIONS, app=APP_OWN_DATA),
    Key("partition-alpha", 0.3, "Dirichlet concentration α", low=0.0, low_open=True, app=APP_OWN_DATA),
    Key("partition-balanced", True, "Dirichlet with equal client sizes (FedDyn routine) or per-class split",
        app=APP_OWN_DATA),
    Key("partition-mixture", 0.5, "c of the c % mixture partition (share of label-sorted data)", low=0.0, high=1.0,
        app=APP_OWN_DATA),
    Key("sampling", "fixed", "client sampling per round (docs/reference/protocol.md)", ("fixed", "bernoulli")),
    Key("clients-per-round", 10, "S for sampling=fixed", low=1),
    Key("participation", 0.1, "p for sampling=bernoulli", low=0.0, high=1.0, low_open=True),
    Key("num-server-rounds", 20, "T, number of rounds (at most 100 000: a run keeps and rewrites its rows every "
        "round)", low=1, high=MAX_ROUNDS, resumable=True),
    Key("local-epochs", 2, "E, local epochs (used when local-steps = 0)", low=1, client=True),
    Key("local-steps", 0, "K, fixed local steps per round; 0 = epoch mode", low=0, client=True),
    Key("local-work", "equal", "each client's local steps K_i (docs/running/systems.md): equal = local-steps for "
        "every client (epoch mode: E·⌈n_i/B⌉); uniform = K_i drawn once per client from [local-steps-min, "
        "local-steps]; per-round = drawn again every round; both seeded by seed", ("equal", "uniform", "per-round")),
    Key("local-steps-min", 0, "local-work uniform/per-round: the smallest K_i drawn (at least 1); local-steps is the "
        "largest; 0 = unset (local-work='equal')", low=0),
    Key("dropout-rate", 0.0, "p: each sampled client drops out of a round with probability p, seeded by seed; it gets "
        "no instruction and counts as a failure (docs/running/systems.md)", low=0.0, high=1.0, high_open=True),
    Key("client-speed", "equal", "client speeds s_i against round-deadline: equal = 1 for every client; uniform = "
        "drawn once per client, log-uniformly on [1/speed-spread, 1], seeded by seed", ("equal", "uniform")),
    Key("speed-spread", 1.0, "client-speed='uniform': the slowest client's speed is 1/speed-spread", low=1.0),
    Key("round-deadline", 0, "D, in local steps a speed-1 client completes: client i can do floor(s_i·D) steps a "
        "round; 0 = no deadline (docs/running/systems.md)", low=0),
    Key("deadline-policy", "partial", "a client whose K_i does not fit round-deadline: partial = takes the steps that "
        "fit (at least one); drop = gets no instruction and counts as late", ("partial", "drop")),
    Key("availability", "always", "which clients can be sampled in a round: always; markov = each client on/off by "
        "a 2-state Markov chain; cycle = on for a fraction of each period at a seeded phase "
        "(docs/running/systems.md)", ("always", "markov", "cycle")),
    Key("availability-p-off", 0.2, "availability='markov': an available client's chance to go off the next round",
        low=0.0, high=1.0, low_open=True),
    Key("availability-p-on", 0.5, "availability='markov': an unavailable client's chance to come back the next round",
        low=0.0, high=1.0, low_open=True),
    Key("availability-period", 10, "availability='cycle': the cycle's length in rounds", low=1),
    Key("availability-fraction", 0.5, "availability='cycle': the share of each period a client is available "
        "(⌈fraction·period⌉ rounds)", low=0.0, high=1.0, low_open=True),
    Key("batch-size", 50, "B; 0 = full local batch", low=0, client=True),
    Key("lr", 0.05, "η_l^0, local learning rate", low=0.0, low_open=True),
    Key("lr-decay", 1.0, "γ, per-round local lr decay: η_l = η_l^0 γ^(t−1) in round t", low=0.0, high=1.0,
        low_open=True),
    Key("weight-decay", 0.0, "coupled L2 added to every local step (docs/algorithms/index.md)", low=0.0, client=True),
    Key("clip-norm", 0.0, "clip each local step's gradient to this L2 norm; 0 = off", low=0.0, client=True),
    Key("clip-scope", "clean", "what clip-norm clips: clean = loss gradient + linear corrections; reference = also "
        "the −μ·centre half of every prox term, as FL-Simulator/FedDyn code (docs/algorithms/index.md)",
        ("clean", "reference"), client=True),
    Key("relaxed-init", 0.0, "β of relaxed initialisation (FedInit): each client starts its round at "
        "x^t + β(x^t − x_i^last), its own last local model (x^0 before its first round); 0 = off "
        "(docs/running/relaxed-init.md)", low=0.0, client=True),
    Key("local-batches", "minibatch", "what one local step trains on: minibatch = B samples (epochs or K draws); "
        "blocks = one of the client's M fixed data blocks (losac-blocks), drawn uniformly, as LoSAC/FedSaga always "
        "do and the LoSAC suite's baselines do (docs/algorithms/losac.md)", ("minibatch", "blocks"), client=True),
    Key("losac-blocks", 5, "M, fixed equal data blocks per client, fixed from the run seed, for "
        "local-batches='blocks'; LoSAC/FedSaga keep one stored block gradient each (M·d client state; "
        "docs/algorithms/losac.md)", low=1, client=True),
    Key("loss-reduction", "mean", "local loss over a minibatch or block: mean, or sum (the LoSAC paper's step sizes "
        "assume sum, docs/algorithms/losac.md)", ("mean", "sum"), client=True),
    Key("agg-scale", "mean", "server move: mean = η_g·mean_S(Δ_i); 1/N = η_g·Σ_S Δ_i / N, the LoSAC paper's eq. (13), "
        "for the algorithms of that suite (docs/algorithms/losac.md)", ("mean", "1/N")),
    Key("server-lr", 1.0, "η_g for averaging algorithms (1 = plain averaging)", low=0.0, low_open=True),
    Key("weighting", "uniform", "aggregation weights over the cohort (docs/algorithms/index.md)",
        ("uniform", "samples")),
    Key("seed", 0, "run seed: partition, cohorts, init, minibatches", low=0, client=True, tunable=False),
    Key("eval-every", 1, "centralised evaluation every r rounds (the last round always)", low=1, resumable=True),
    Key("eval-batch-size", 1000, "batch size of server-side evaluation", low=1, resumable=True),
    Key("targets", "0.7,0.75,0.8", "comma-separated accuracy targets for rounds-to-target", resumable=True),
    Key("evaluation", "central", "who evaluates the global model: central = the server on its test set; federated "
        "= clients on their own held-out data in Flower's evaluate round; both", EVALUATIONS),
    Key("eval-clients", 0, "evaluation federated/both: clients that evaluate per round, drawn by seed from all N; 0 = "
        "the round's cohort", low=0),
    Key("local-test-fraction", 0.2, "evaluation federated/both: the share of a client's training data held out, "
        "drawn by seed, as its test data when the data has no per-client test split", low=0.0, high=1.0,
        low_open=True, high_open=True, app="clients evaluate on their client(test=...) data"),
    Key("validation-fraction", 0.0, "share of each client's training data held out by seed as validation data, "
        "evaluated as the test data is (centrally on the union, federatedly per client); 0 = none", low=0.0,
        high=1.0, high_open=True, app="hold out validation data in your own loaders", tunable=False),
    Key("target-metric", "auto", "the accuracy rounds-to-target reads: accuracy (central test), fed-accuracy, "
        "val-accuracy, fed-val-accuracy; auto = accuracy, or fed-accuracy when evaluation='federated'",
        TARGET_METRICS),
    Key("prune-at", "", "stop the run (status pruned) at the end of round r when its prune-score is worse than v: "
        "'r:v,r:v,…' (simulation.tune --prune sets it from earlier trials; docs/running/tuning.md#pruning)",
        tunable=False),
    Key("prune-score", "val_accuracy", "the validation column prune-at reads (an accuracy must reach its mark, a loss "
        "stay at or below it)", PRUNE_SCORES, tunable=False),
    Key("server-data", True, "the server holds the dataset (for x^0's shapes, the partition and central evaluation); "
        "false = data lives only on the nodes: the model is built from input-shape and num-classes, evaluation "
        "must be federated", app=APP_OWN_DATA),
    Key("input-shape", "", "server-data=false: one sample's shape, comma-separated (e.g. '8' or '3,32,32')",
        app=APP_OWN_DATA),
    Key("num-classes", 0, "server-data=false: number of classes (1 = regression)", low=0, app=APP_OWN_DATA),
    Key("out-dir", "results", "results root; a relative path starts at the current directory of simulation.run "
        "(of the SuperLink under a plain flwr run)", resumable=True, app=APP_RESULTS, tunable=False),
    Key("run-name", "", "results sub-folder: one folder name inside out-dir (no '/', not '.' or '..'); empty = "
        "<algorithm>-<dataset>-<timestamp>-<random>", resumable=True, app=APP_RESULTS, tunable=False),
    Key("overwrite", False, "replace the results of an earlier fedsuite run in out-dir/run-name (else that is an "
        "error); removes only the files such a run wrote, and refuses a folder no run made", resumable=True,
        tunable=False),
    Key("tensorboard", False, "also write TensorBoard event files (per-round scalars, the run config) into the "
        "results folder; needs the tracking extra", resumable=True, app=APP_TRACKING),
    Key("wandb-mode", "off", "log to Weights & Biases: offline = a local run folder for `wandb sync`, online = live; "
        "needs the tracking extra", ("off", "offline", "online"), resumable=True, app=APP_TRACKING),
    Key("wandb-project", "fedsuite", "the Weights & Biases project runs are logged to",
        resumable=True, app=APP_TRACKING),
    Key("min-replies", 0.5, "share of each round's cohort that must reply validly, else the run stops as failed "
        "(0 = go on with any number, a round without replies keeps x)", low=0.0, high=1.0, resumable=True),
    Key("round-timeout", 0.0, "seconds a round waits for a client's reply before counting it as failed (Flower's "
        "round_timeout; in a deployment the only end for a hung client on a healthy SuperNode); 0 = no limit",
        low=0.0, resumable=True),
    Key("divergence-factor", 100.0, "stop as diverged when the test loss exceeds this multiple of the initial "
        "loss, or the cohort's train loss this multiple of its first value (0 = only non-finite models and "
        "losses)", low=0.0, resumable=True),
    Key("device", "auto", "where clients and server compute", ("auto", "cpu", "cuda"),
        resumable=True, app="use client(device=...); the server evaluates on your model's device"),
    Key("autocast", "none", "local training forward pass: none = float32; bf16 = bfloat16 autocast (GPU speed "
        "option; changes the numbers)", ("none", "bf16"), client=True),
    Key("channels-last", False, "4-D inputs in NHWC memory order for local training (GPU speed option)", client=True),
    Key("client-threads", 1, "torch threads per client process", low=1, resumable=True),
    Key("reuse-host-memory", True, "keep freed model-sized host buffers in each process of the run (server, "
        "clients) for the next one instead of returning them to the OS and page-faulting them in again (glibc "
        "only; the same numbers, a process keeps its high-water mark of host memory; docs/performance.md"
        "#host-memory-freed-buffers-kept-for-reuse)", resumable=True, tunable=False,
        app="call fedsuite.state.host_memory.reuse_host_memory(True) in your app's processes"),
    Key("batch-clients", False, "train each round's clients with the same K_i, minibatch sizes and update rule as "
        "one stacked computation (GPU speed option; equal up to float rounding, docs/running/batched.md): in "
        "process, and under flwr run with client-mapping='logical', where each node's share of a round travels in "
        "one message (batch-messages); under flwr run, client-mapping='fixed', secagg=true and models with buffers "
        "keep one message per client, said in one line", tunable=False,
        app="fedsuite.app clients train one at a time"),
    Key("batch-messages", 1, "with batch-clients=true under flwr run: how many nodes (at most the connected ones) a "
        "round's clients are split over in consecutive blocks, each node's block in one message, trained there as "
        "one batched computation (1: the whole round on one node, for one GPU; the number of GPUs, or Ray "
        "workers, for several)", low=1, tunable=False, app="fedsuite.app clients train one at a time"),
    Key("cuda-graphs", True, "with batch-clients=true on a CUDA device: each round's stacked step recorded once as a "
        "CUDA graph and replayed (GPU speed option; the same kernels, so the same numbers; rules whose stages change "
        "between steps run step by step, docs/running/batched.md#cuda-graphs)", tunable=False,
        app="fedsuite.app clients train one at a time"),
    Key("batch-chunk", 0, "with batch-clients=true: the most clients one stacked computation trains; a larger "
        "group trains in even chunks, one after another (0 = the memory plan chooses: on a CUDA device as many as "
        "its free memory holds, measured; on a CPU the whole group while half the available host memory holds its "
        "vectors; the same numbers up to float rounding, docs/running/batched.md#large-cohorts-chunks)", low=0,
        tunable=False, app="fedsuite.app clients train one at a time"),
    Key("synthetic-dim", 20, "d of the synthetic federation", low=1, app=APP_OWN_DATA),
    Key("synthetic-samples", 50, "samples per client of the synthetic federation", low=1, app=APP_OWN_DATA),
    Key("synthetic-heterogeneity", 1.0, "spread of client optima and feature scales", low=0.0, app=APP_OWN_DATA),
    Key("synthetic-noise", 0.1, "label noise std of the synthetic federation", low=0.0, app=APP_OWN_DATA),
    Key("lowrank-size", 64, "synthetic-lowrank: side of the square matrix X (docs/lowrank/index.md)", low=1,
        app=APP_OWN_DATA),
    Key("lowrank-rank", 4, "synthetic-lowrank: rank r of the ground truth X_G = diag(I_r, 0)", low=0, app=APP_OWN_DATA),
    Key("client-state", "auto", "where persistent client state lives (auto: memory while it fits the budget, on a "
        "CUDA card's memory when the whole federation runs in one process and fits a quarter of it; device: on the "
        "training device, in-process engine only, docs/running/scale.md#state-on-the-device)",
        ("auto", "memory", "disk", "device"), resumable=True, app=APP_STATE),
    Key("client-state-budget-mb", 4096.0, "host memory budget for all clients' state (auto mode; state kept on a "
        "CUDA card is bounded by a quarter of the card instead)", low=0.0,
        resumable=True, app=APP_STATE),
    Key("client-state-dir", "", "folder for on-disk client state (client-state=disk); empty = a per-run temp folder",
        resumable=True, app=APP_STATE),
    Key("checkpoint-every", 0, "write a checkpoint (global model, server state, results, client state) into the "
        "results folder every r rounds and after the last; 0 = never", low=0, resumable=True, app=APP_CHECKPOINT),
    Key("resume-from", "", "results folder of a run with a checkpoint: continue it from there (num-server-rounds "
        "may be larger); every other key that changes the numbers must be the same",
        resumable=True, app=APP_CHECKPOINT, tunable=False),
    # --- client-level differential privacy (docs/privacy.md)
    Key("dp", "off", "client-level differential privacy of every vector a client uploads: off; server = clipped on "
        "the clients, Gaussian noise added to the sum by the server (trusted server); clients = each client adds its "
        "share of the noise (the sum carries it; the form for secure aggregation)", ("off", "server", "clients"),
        client=True, tunable=False),
    Key("dp-noise", 1.0, "σ, the noise multiplier: the noise on the sum of the cohort's clipped uploads has std σ·C",
        low=0.0, client=True, tunable=False),
    Key("dp-clip", 1.0, "C, the L2 norm each client's uploads are clipped to, jointly (with dp-clip-mode=adaptive: "
        "the first round's C)", low=0.0, low_open=True, client=True, tunable=False),
    Key("dp-clip-mode", "fixed", "fixed = C throughout; adaptive = C follows the dp-clip-quantile of the clients' "
        "update norms, estimated privately (geometric update)", ("fixed", "adaptive"), client=True, tunable=False),
    Key("dp-clip-quantile", 0.5, "adaptive clipping: the share of clients whose uploads C should leave unclipped",
        low=0.0, high=1.0, low_open=True, high_open=True, tunable=False),
    Key("dp-clip-lr", 0.2, "adaptive clipping: η_C of the geometric update C ← C·exp(−η_C (b̃ − quantile))",
        low=0.0, low_open=True, tunable=False),
    Key("dp-count-noise", 0.0, "adaptive clipping: σ_b, std of the noise on the count of unclipped clients; 0 = "
        "clients-per-round / 20; must exceed dp-noise / 2", low=0.0, client=True, tunable=False),
    Key("dp-delta", 1e-5, "δ of the (ε, δ) budgets the run reports (client-level and DP-SGD)", low=0.0, high=1.0,
        low_open=True, high_open=True, client=True, tunable=False),
    Key("dp-target-epsilon", 0.0, "stop the run (status budget-spent) before a round that would take ε above this "
        "(client-level DP, DP-SGD or both); 0 = no target", low=0.0, tunable=False),
    Key("dp-noise-source", "secure", "where every DP noise value comes from (client-level DP and DP-SGD, "
        "docs/privacy.md): secure = streams keyed by secrets from the OS's entropy, never written anywhere, so "
        "nobody can recompute the noise; seeded = from the run seed, for reproducible studies only: anyone holding "
        "config.json can subtract the noise, so the run is NOT private", ("secure", "seeded"), client=True,
        tunable=False),
    # --- DP-SGD (sample-level privacy)
    Key("dp-sgd", False, "sample-level differential privacy of every client's records (DP-SGD, "
        "docs/privacy-dp-sgd.md): each local step's gradient is the sum of per-record gradients clipped to "
        "dp-sgd-clip plus Gaussian noise, divided by the batch size; needs local-steps > 0 and the privacy extra",
        client=True, tunable=False),
    Key("dp-sgd-noise", 1.0, "σ_s, the DP-SGD noise multiplier: noise std σ_s·C_s on the sum of clipped per-record "
        "gradients (0 = no noise: ε is infinite)", low=0.0, client=True, tunable=False),
    Key("dp-sgd-clip", 1.0, "C_s, the L2 norm every per-record gradient is clipped to (DP-SGD)", low=0.0,
        low_open=True, client=True, tunable=False),
    Key("dp-sgd-per-record", "vmap", "how DP-SGD clips each record's gradient (docs/privacy-dp-sgd.md#per-record-"
        "gradients): vmap = every record's gradient by torch.func's vmap of grad, any model; ghost = ghost "
        "clipping, the records' gradient norms from each layer's inputs and output gradients and then one more "
        "backward pass, without the per-record gradients, for models of linear, convolution and group or layer "
        "norm layers, without autocast; the same clipped sums to float rounding", ("vmap", "ghost"), client=True,
        tunable=False),
    # --- secure aggregation (SecAgg+)
    Key("secagg", False, "secure aggregation with Flower's SecAgg+ (docs/privacy-secagg.md): the server learns only "
        "the cohort's mean of each uploaded array, never one client's; needs client-mapping='fixed'", client=True,
        tunable=False, app=APP_SECAGG),
    Key("secagg-shares", 0, "SecAgg+: the neighbours each client's secrets are shared among (odd, at least 3); 0 = "
        "the whole cohort", low=0, tunable=False, app=APP_SECAGG),
    Key("secagg-threshold", 0, "SecAgg+: shares that reconstruct a dropped client's secrets (at least 2, fewer than "
        "secagg-shares); 0 = two thirds of the shares, at least 2", low=0, tunable=False, app=APP_SECAGG),
    Key("secagg-clip-range", 8.0, "SecAgg+: every uploaded value is clipped to [−r, r] before quantisation",
        low=0.0, low_open=True, tunable=False, app=APP_SECAGG),
    Key("secagg-quantization", 4194304, "SecAgg+: integer levels over [−r, r] (2**22); the masks live modulo 2**32, "
        "so clients-per-round × this must stay below 2**32", low=2, tunable=False, app=APP_SECAGG),
    # --- compressed uplinks and downlinks (docs/running/compression.md)
    Key("compress-up", "none", "compressor of every vector a client uploads: none; topk = the k largest magnitudes; "
        "randk = k coordinates from a seed both sides derive (only the values travel); qsgd = unbiased s-level "
        "quantization; sign = one bit per coordinate and the mean magnitude", COMPRESSORS, client=True),
    Key("compress-up-k", 0, "topk / randk: coordinates kept of each uploaded vector, 1 ≤ k ≤ d (0 = unset, refused "
        "with topk and randk)", low=0, client=True),
    Key("compress-up-levels", 15, "qsgd: quantization levels s per coordinate (1 + ceil(log2(s + 1)) bits each)",
        low=1, high=65535, client=True),
    Key("compress-feedback", "none", "error feedback of a biased uplink compressor, kept as client state: none; ef = "
        "classic (send C(e + x), keep the error); ef21 = send C(x − g_i), client and server keep the estimates",
        ("none", "ef", "ef21"), client=True),
    Key("compress-up-mask", "own", "randk: own = each client draws its coordinates from its own seed; common = every "
        "client of a round draws the same coordinates (the only uplink compression SecAgg+ can sum)",
        ("own", "common"), client=True, tunable=False),
    Key("compress-down", "none", "compressor of what the server broadcasts: none; topk, randk or sign of the change "
        "since the model the clients hold, with a server-side accumulator (docs/running/compression.md#downlink)",
        DOWNLINK_COMPRESSORS, client=True, tunable=False),
    Key("compress-down-k", 0, "compress-down topk / randk: coordinates kept of each broadcast vector, 1 ≤ k ≤ d "
        "(0 = unset, refused with topk and randk)", low=0, client=True, tunable=False),
)  # fmt: skip
# The common keys by name: where a typed settings group (fedsuite/config/settings.py) reads a default.
COMMON_SCHEMA: dict[str, Key] = {key.name: key for key in COMMON_KEYS}
