"""Run-config schema: every key's default, type, range and allowed values, checked before any training.

`resolve(run_config)` merges Flower's run config over the defaults and returns a `Config`, or raises one
`ConfigError` that lists every bad key with what is allowed. Algorithm hyper-parameters are declared here too
(grouped by the algorithm family that reads them). The schema is the only place a default is written:
pyproject.toml's `[tool.flwr.app.config]` table (where Flower reads them) is generated from it
(`python -m fedsuite.config --write-pyproject`), the run-config reference page docs/reference/run-config.md too
(simulation.algorithms).
A `Config` also carries typed settings objects (`cfg.local`, `cfg.evaluation`, …) for the groups the code reads.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any, Self, get_type_hints

Scalar = bool | int | float | str


class ConfigError(ValueError):
    """A run-config value is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class Key:
    name: str
    default: Scalar
    help: str
    choices: tuple[str, ...] | None = None
    low: float | None = None  # inclusive lower bound
    high: float | None = None  # inclusive upper bound
    low_open: bool = False  # lower bound is strict (value > low)
    high_open: bool = False  # upper bound is strict (value < high)
    # tags: what the rest of the suite needs to know about the key, kept on the key (no list elsewhere)
    resumable: bool = False  # may differ between a run and its resumption: where things go, how long, how checked
    app: str | None = None  # fedsuite.app refuses it as a setting; this says what replaces it there
    client: bool = False  # fedsuite.app's clients read it from the settings they share with the server
    tunable: bool = True  # a tuning's --space may search it (not: what a tuning sets itself, e.g. seed, out-dir)

    def check(self, value: Any) -> tuple[Scalar | None, str | None]:
        """Return (converted value, None) or (None, error message)."""
        want = type(self.default)
        if want is bool:
            if not isinstance(value, bool):
                return None, f"{self.name}={value!r}: expected true or false"
        elif want is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return None, f"{self.name}={value!r}: expected an integer"
            if not -(2**63) <= value < 2**63:  # Flower carries run-config integers as signed 64-bit
                return None, f"{self.name}={value!r}: out of range (Flower's run config holds integers below 2**63)"
        elif want is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None, f"{self.name}={value!r}: expected a number"
            value = float(value)
            if not math.isfinite(value):
                return None, f"{self.name}={value!r}: expected a finite number"
        elif not isinstance(value, str):
            return None, f"{self.name}={value!r}: expected a string"
        if self.choices is not None and value not in self.choices:
            return None, f"{self.name}={value!r}: allowed values are {', '.join(self.choices)}"
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            op = ">" if self.low_open else ">="
            upper = f" and {'<' if self.high_open else '<='} {self.high:g}" if self.high is not None else ""
            rng = f"{op} {self.low:g}{upper}"
            return None, f"{self.name}={value!r}: must be {rng}"
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return None, f"{self.name}={value!r}: must be {'<' if self.high_open else '<='} {self.high:g}"
        return value, None


PLUGIN_CONFIG = "plugin-config"  # the one key through which plug-in algorithms' keys pass Flower's run config
MAX_ROUNDS = 100_000  # a run keeps every round's row and rewrites its summary from them each round

# Names the registries fill in; kept here so validation never imports torch or Flower.
ALGORITHMS = (
    "fedavg", "fedprox", "fedadam", "fedyogi", "fedadagrad", "scaffold", "feddyn", "fedadmm", "fedcm", "fedsam",
    "mofedsam", "fedspeed", "fedspeed-ing", "fedmim", "localadam", "fadamet", "fadamgt", "fedlada", "mimesvrg",
    "losac", "fedsaga", "losac-prox", "scaffold-prox",
)  # fmt: skip
DATASETS = (
    "fashion-mnist", "mnist", "cifar10", "cifar100", "tinyimagenet", "har", "esr",
    "synthetic-lsq", "synthetic-logistic", "synthetic-lowrank",
)  # fmt: skip
MODELS = ("auto", "cnn", "2nn", "logreg", "resnet18-gn", "linear", "matrix")
# Own data in a standard layout (fedsuite/data/own.py); any other own data is `dataset='package.module:loader'`.
DATA_FORMATS = ("imagefolder", "table", "hf")
PARTITIONS = ("iid", "dirichlet", "shards", "mixture", "natural")
BUFFERS = ("average", "local")
EVALUATIONS = ("central", "federated", "both")
TARGET_METRICS = ("auto", "accuracy", "fed-accuracy", "val-accuracy", "fed-val-accuracy")
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

COMMON_KEYS: tuple[Key, ...] = (
    Key("algorithm", "fedavg", "federated optimiser (see the algorithm table)", ALGORITHMS,
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
        "\"fedavgm-beta=0.9\": `flwr run` accepts only the keys of pyproject.toml's table, so a plug-in's keys travel "
        "in this one (simulation.run packs them itself); resolved, they stand beside the built-in keys "
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
    Key("batch-size", 50, "B; 0 = full local batch", low=0, client=True),
    Key("lr", 0.05, "η_l^0, local learning rate", low=0.0, low_open=True),
    Key("lr-decay", 1.0, "γ, per-round local lr decay: η_l = η_l^0 γ^(t−1) in round t", low=0.0, high=1.0,
        low_open=True),
    Key("weight-decay", 0.0, "coupled L2 added to every local step (docs/algorithms/index.md)", low=0.0, client=True),
    Key("clip-norm", 0.0, "clip each local step's gradient to this L2 norm; 0 = off", low=0.0, client=True),
    Key("clip-scope", "clean", "what clip-norm clips: clean = loss gradient + linear corrections; reference = also "
        "the −μ·centre half of every prox term, as FL-Simulator/FedDyn code (docs/algorithms/index.md)",
        ("clean", "reference"), client=True),
    Key("local-batches", "minibatch", "what one local step trains on: minibatch = B samples (epochs or K draws); "
        "blocks = one of the client's M fixed data blocks (losac-blocks), drawn uniformly, as LoSAC/FedSaga always "
        "do and the LoSAC suite's baselines do (docs/algorithms/losac.md)", ("minibatch", "blocks"), client=True),
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
    Key("server-data", True, "the server holds the dataset (for x^0's shapes, the partition and central evaluation); "
        "false = data lives only on the nodes: the model is built from input-shape and num-classes, evaluation "
        "must be federated", app=APP_OWN_DATA),
    Key("input-shape", "", "server-data=false: one sample's shape, comma-separated (e.g. '8' or '3,32,32')",
        app=APP_OWN_DATA),
    Key("num-classes", 0, "server-data=false: number of classes (1 = regression)", low=0, app=APP_OWN_DATA),
    Key("out-dir", "results", "results root; a relative path starts at the current directory of simulation.run "
        "(of the SuperLink under a plain flwr run)", resumable=True, app=APP_RESULTS, tunable=False),
    Key("run-name", "", "results sub-folder; empty = <algorithm>-<dataset>-<timestamp>-<random>",
        resumable=True, app=APP_RESULTS, tunable=False),
    Key("overwrite", False, "replace the results of an earlier run in out-dir/run-name (else that is an error)",
        resumable=True, tunable=False),
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
    Key("synthetic-dim", 20, "d of the synthetic federation", low=1, app=APP_OWN_DATA),
    Key("synthetic-samples", 50, "samples per client of the synthetic federation", low=1, app=APP_OWN_DATA),
    Key("synthetic-heterogeneity", 1.0, "spread of client optima and feature scales", low=0.0, app=APP_OWN_DATA),
    Key("synthetic-noise", 0.1, "label noise std of the synthetic federation", low=0.0, app=APP_OWN_DATA),
    Key("lowrank-size", 64, "synthetic-lowrank: side of the square matrix X (docs/lowrank/index.md)", low=1,
        app=APP_OWN_DATA),
    Key("lowrank-rank", 4, "synthetic-lowrank: rank r of the ground truth X_G = diag(I_r, 0)", low=0, app=APP_OWN_DATA),
    Key("client-state", "auto", "where persistent client state lives (auto: memory while it fits the budget)",
        ("auto", "memory", "disk"), resumable=True, app=APP_STATE),
    Key("client-state-budget-mb", 4096.0, "memory budget for all clients' state (auto mode)", low=0.0,
        resumable=True, app=APP_STATE),
    Key("client-state-dir", "", "folder for on-disk client state (client-state=disk); empty = a per-run temp folder",
        resumable=True, app=APP_STATE),
    Key("checkpoint-every", 0, "write a checkpoint (global model, server state, results, client state) into the "
        "results folder every r rounds and after the last; 0 = never", low=0, resumable=True, app=APP_CHECKPOINT),
    Key("resume-from", "", "results folder of a run with a checkpoint: continue it from there (num-server-rounds "
        "may be larger); every other key that changes the numbers must be the same",
        resumable=True, app=APP_CHECKPOINT, tunable=False),
)  # fmt: skip

# Hyper-parameters by family; the registry says which algorithm reads which.
ALGORITHM_KEYS: tuple[Key, ...] = (
    Key("prox-mu", 0.01, "FedProx μ, gradient term μ(x − x^t) (docs/algorithms/fedprox.md)", low=0.0),
    Key("fedopt-lr", 0.1, "FedAdam/FedYogi/FedAdagrad server lr η_g (docs/algorithms/fedadam.md)", low=0.0,
        low_open=True),
    Key("fedopt-beta1", 0.9, "FedOpt β1 (docs/algorithms/fedadam.md)", low=0.0, high=1.0),
    Key("fedopt-beta2", 0.99, "FedOpt β2 (FedAdam/FedYogi; docs/algorithms/fedadam.md)", low=0.0, high=1.0),
    Key("fedopt-tau", 0.01, "FedOpt adaptivity τ (docs/algorithms/fedadam.md)", low=0.0, low_open=True),
    Key("scaffold-option", 2, "SCAFFOLD control-variate update: 2 = from the displacement, 1 = full local pass "
        "(docs/algorithms/scaffold.md)",
        low=1, high=2),
    Key("feddyn-alpha", 0.1, "FedDyn α_d (docs/algorithms/feddyn.md)", low=0.0, low_open=True),
    Key("dual-storage", "client", "FedDyn/FedSpeed duals held by clients, or mirrored on the server (+1 d down)",
        ("client", "server")),
    Key("fedadmm-rho", 0.1, "FedADMM ρ (docs/algorithms/fedadmm.md)", low=0.0, low_open=True),
    Key("fedadmm-variant", "wang", "FedADMM reading: wang = consensus ADMM (exact), gong = Gong et al. "
        "(docs/algorithms/fedadmm.md)",
        ("wang", "gong")),
    Key("fedcm-alpha", 0.1, "FedCM/MoFedSAM α, weight of the local gradient (docs/algorithms/fedcm.md)", low=0.0,
        high=1.0, low_open=True),
    Key("sam-rho", 0.1, "FedSAM/MoFedSAM ascent radius ρ (docs/algorithms/fedsam.md)", low=0.0),
    Key("fedspeed-mu", 0.1, "FedSpeed prox weight μ = 1/λ (docs/algorithms/fedspeed.md)", low=0.0, low_open=True),
    Key("fedspeed-rho", 0.1, "FedSpeed normalised ascent radius ρ0 (docs/algorithms/fedspeed.md)", low=0.0),
    Key("fedspeed-alpha", 1.0, "FedSpeed perturbation weight α: g̃ = (1−α)g1 + αg2 "
        "(docs/algorithms/fedspeed.md)", low=0.0, high=1.0),
    Key("fedspeed-dual-agg", "all", "FedSpeed dual aggregation: all = code form, sampled = thesis form "
        "(docs/algorithms/fedspeed.md)",
        ("all", "sampled")),
    Key("fedspeed-ing-zeta", 0.1, "FedSpeed-Ing extrapolation ζ (docs/algorithms/fedspeed-ing.md)", low=0.0),
    Key("fedspeed-ing-dual-agg", "all", "FedSpeed-Ing dual aggregation: all = as FedSpeed (ζ = 0 is FedSpeed), "
        "sampled = the thesis' Alg. 3 (docs/algorithms/fedspeed-ing.md)",
        ("all", "sampled")),
    Key("fedmim-alphas", "0.6,0.3", "FedMIM α_j, newest first; J = their count, Σα_j < 1 (docs/algorithms/fedmim.md)"),
    Key("fedmim-betas", "0.9,0.1", "FedMIM β_j, newest first, as many as α_j (docs/algorithms/fedmim.md)"),
    Key("adam-beta1", 0.9, "local Adam β1 of LocalAdam, FAdamET/GT and FedLADA; m is reset every round "
        "(docs/algorithms/fadamet.md)",
        low=0.0, high=1.0),
    Key("adam-beta2", 0.99, "local Adam β2; v_i persists per client (LocalAdam, FAdamET/GT; "
        "docs/algorithms/fadamet.md)", low=0.0,
        high=1.0),
    Key("adam-eps", 1e-8, "local Adam ε in m/(√v̂ + ε) (docs/algorithms/fadamet.md)", low=0.0, low_open=True),
    Key("tracking-clients", 0, "FAdamET/GT: |Y^t|, sampled clients that refresh y_i each round (at most |S^t|); "
        "0 = half of the realised cohort, at least 1 (docs/algorithms/fadamet.md)", low=0),
    Key("losac-blocks", 5, "M, fixed equal data blocks per client, fixed from the run seed; LoSAC/FedSaga keep one "
        "stored block gradient each (M·d client state; docs/algorithms/losac.md)", low=1, client=True),
    Key("losac-phi-scale", "1", "LoSAC server estimate: 1 = ϕ ← ϕ + Σ_S Δϕ_i (exact, ϕ = Σ_N ḡ_n); N/S = the paper's "
        "eq. (13) factor (docs/algorithms/losac.md)", ("1", "N/S")),
    Key("prox-penalty", "l1", "LoSAC-Prox/SCAFFOLD-Prox Ψ: l1 = λ‖x‖₁ (soft threshold); nuclear = λ‖X‖_* of every "
        "matrix-shaped parameter (SVD shrinkage; docs/algorithms/losac-prox.md)", ("l1", "nuclear"), client=True),
    Key("prox-lambda", 0.01, "λ of the proximal penalty Ψ (LoSAC-Prox, SCAFFOLD-Prox; "
        "docs/algorithms/losac-prox.md)", low=0.0, client=True),
    Key("fedlada-alpha", 0.1, "FedLADA α, weight of the local Adam direction against the global g_a "
        "(docs/algorithms/fedlada.md)",
        low=0.0, high=1.0),
)  # fmt: skip

SCHEMA: dict[str, Key] = {k.name: k for k in COMMON_KEYS + ALGORITHM_KEYS}


def active_schema() -> dict[str, Key]:
    """SCHEMA with what registered algorithms add (fedsuite.registry): their names among `algorithm`'s allowed
    values and their own run-config keys. Without plug-ins this is SCHEMA."""
    from fedsuite.registry import ALGORITHMS as REGISTERED
    from fedsuite.registry import extra_keys

    names = tuple(REGISTERED)
    extra = extra_keys()
    if names == ALGORITHMS and not extra:
        return SCHEMA
    schema = dict(SCHEMA)
    schema["algorithm"] = replace(SCHEMA["algorithm"], choices=names)
    for key in extra:
        if key.name in schema and schema[key.name] != key:
            raise ConfigError(f"run-config key {key.name!r} is declared twice, differently (a plug-in algorithm?)")
        schema[key.name] = key
    return schema


# --- typed settings: the groups of keys the code reads together, built once per Config ---------------------------


def _key(name: str, parse: Callable[[Any], Any] | None = None) -> Any:
    """A settings field holding run-config key `name`, converted by `parse` (default: the field's own type)."""
    return field(metadata={"key": name, "parse": parse})


class Settings:
    """Base of the typed settings objects: frozen dataclasses whose fields name their run-config key."""

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Field name → the run-config key it holds."""
        return {f.name: f.metadata["key"] for f in fields(cls)}

    @classmethod
    def from_values(cls, values: Mapping[str, Scalar]) -> Self:
        """The settings read from validated run-config values (a Config or resolve's dict)."""
        return cls(**{name: parse(values[key]) for name, key, parse in _readers(cls)})


@cache
def _readers(cls: type[Settings]) -> tuple[tuple[str, str, Callable[[Any], Any]], ...]:
    """(field name, run-config key, converter) of each field of `cls`."""
    types = get_type_hints(cls)
    return tuple((f.name, f.metadata["key"], f.metadata["parse"] or types[f.name]) for f in fields(cls))


def float_list(text: str) -> tuple[float, ...]:
    return tuple(float(t) for t in text.split(",") if t.strip())


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


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

    name: str = _key("dataset")
    data_dir: str = _key("data-dir")
    download: bool = _key("download")
    label_transform: str = _key("label-transform")
    colour_perturbation: bool = _key("colour-perturbation")
    image_size: int = _key("image-size")
    label_column: str = _key("label-column")
    feature_column: str = _key("feature-column")
    partition_column: str = _key("partition-column")
    on_server: bool = _key("server-data")
    input_shape: tuple[int, ...] = _key("input-shape", parse=int_list)
    num_classes: int = _key("num-classes")


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

    num_clients: int = _key("num-clients")
    samples: int = _key("synthetic-samples")
    dim: int = _key("synthetic-dim")
    heterogeneity: float = _key("synthetic-heterogeneity")
    noise: float = _key("synthetic-noise")
    weight_decay: float = _key("weight-decay")
    seed: int = _key("seed")
    lowrank_size: int = _key("lowrank-size")
    lowrank_rank: int = _key("lowrank-rank")


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

    scheme: str = _key("partition")
    num_clients: int = _key("num-clients")
    seed: int = _key("seed")
    alpha: float = _key("partition-alpha")
    balanced: bool = _key("partition-balanced")
    mixture: float = _key("partition-mixture")


@dataclass(frozen=True)
class ClientSampling(Settings):
    """Which clients take part in a round (docs/reference/protocol.md, Client sampling; fedsuite/sampling.py's Sampler).

    mode (sampling): 'fixed' (S clients without replacement) or 'bernoulli' (each with probability p).
    num_clients (num-clients): N, the clients to draw from.
    clients_per_round (clients-per-round): S for mode 'fixed'.
    participation (participation): p for mode 'bernoulli'.
    seed (seed): run seed.
    """

    mode: str = _key("sampling")
    num_clients: int = _key("num-clients")
    clients_per_round: int = _key("clients-per-round")
    participation: float = _key("participation")
    seed: int = _key("seed")


@dataclass(frozen=True)
class LocalLoop(Settings):
    """How a client trains in one round (fedsuite/local.py's train_local, clients/base.py, fedsuite/node.py).

    epochs (local-epochs): E, local epochs, used when steps = 0.
    steps (local-steps): K, fixed local steps per round; 0 = epoch mode.
    batch_size (batch-size): B; 0 = the full local batch.
    lr (lr): η_l^0, the local learning rate of round 1.
    lr_decay (lr-decay): γ, η_l^t = η_l^0 γ^t.
    weight_decay (weight-decay): coupled L2 added to every local step.
    clip_norm (clip-norm): clip each step's gradient to this L2 norm; 0 = off.
    clip_scope (clip-scope): 'clean' or 'reference', what clip_norm clips (docs/algorithms/index.md).
    local_batches (local-batches): 'minibatch' (B samples) or 'blocks' (one of the client's fixed blocks).
    blocks (losac-blocks): M, the fixed data blocks per client for local_batches = 'blocks'.
    loss_reduction (loss-reduction): 'mean' or 'sum' over a minibatch or block.
    client_threads (client-threads): torch threads per client process.
    autocast (autocast): 'none' (float32) or 'bf16' forward pass.
    channels_last (channels-last): 4-D inputs in NHWC memory order.
    """

    epochs: int = _key("local-epochs")
    steps: int = _key("local-steps")
    batch_size: int = _key("batch-size")
    lr: float = _key("lr")
    lr_decay: float = _key("lr-decay")
    weight_decay: float = _key("weight-decay")
    clip_norm: float = _key("clip-norm")
    clip_scope: str = _key("clip-scope")
    local_batches: str = _key("local-batches")
    blocks: int = _key("losac-blocks")
    loss_reduction: str = _key("loss-reduction")
    client_threads: int = _key("client-threads")
    autocast: str = _key("autocast")
    channels_last: bool = _key("channels-last")


@dataclass(frozen=True)
class Aggregation(Settings):
    """How the server combines the cohort's replies (strategies/*).

    server_lr (server-lr): η_g of the averaging algorithms (1 = plain averaging).
    weighting (weighting): 'uniform' or 'samples', the weights over the cohort.
    agg_scale (agg-scale): 'mean' (η_g·mean_S Δ_i) or '1/N' (η_g·Σ_S Δ_i / N, docs/algorithms/losac.md).
    """

    server_lr: float = _key("server-lr")
    weighting: str = _key("weighting")
    agg_scale: str = _key("agg-scale")


@dataclass(frozen=True)
class Evaluation(Settings):
    """Who evaluates the global model, on what, and when (fedsuite/evaluation.py, the clients' evaluate).

    eval_every (eval-every): evaluate every r rounds (the last round always).
    eval_batch_size (eval-batch-size): batch size of the evaluation passes.
    targets (targets): the accuracy targets for rounds-to-target, parsed ('0.7,0.8' → (0.7, 0.8)).
    mode (evaluation): 'central', 'federated' or 'both'.
    eval_clients (eval-clients): clients evaluating per round; 0 = the round's cohort.
    local_test_fraction (local-test-fraction): a client's held-out test share when its data has no test split.
    validation_fraction (validation-fraction): each client's held-out validation share; 0.0 = no validation split.
    target_metric (target-metric): the accuracy rounds-to-target reads, 'auto' resolved (see `target_column`).
    """

    eval_every: int = _key("eval-every")
    eval_batch_size: int = _key("eval-batch-size")
    targets: tuple[float, ...] = _key("targets", parse=float_list)
    mode: str = _key("evaluation")
    eval_clients: int = _key("eval-clients")
    local_test_fraction: float = _key("local-test-fraction")
    validation_fraction: float = _key("validation-fraction")
    target_metric: str = _key("target-metric")

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
    """How long a run goes, where it computes and when it stops early (fedsuite/server_app.py).

    num_rounds (num-server-rounds): T.
    min_replies (min-replies): share of a round's cohort that must reply validly, else the run fails.
    round_timeout (round-timeout): seconds a round waits for a reply; 0.0 = no limit (Flower's None).
    divergence_factor (divergence-factor): stop as diverged above this multiple of the initial test loss (or of
        the cohort's first train loss).
    checkpoint_every (checkpoint-every): checkpoint every r rounds and after the last; 0 = never.
    resume_from (resume-from): results folder to continue; '' = a fresh run.
    client_mapping (client-mapping): 'logical' or 'fixed' (one SuperNode per partition).
    device (device): 'auto', 'cpu' or 'cuda'.
    """

    num_rounds: int = _key("num-server-rounds")
    min_replies: float = _key("min-replies")
    round_timeout: float = _key("round-timeout")
    divergence_factor: float = _key("divergence-factor")
    checkpoint_every: int = _key("checkpoint-every")
    resume_from: str = _key("resume-from")
    client_mapping: str = _key("client-mapping")
    device: str = _key("device")


@dataclass(frozen=True)
class Output(Settings):
    """Where the results go (fedsuite/results.py).

    out_dir (out-dir): results root; a relative path starts at the current directory of simulation.run (of the
        SuperLink under a plain flwr run).
    run_name (run-name): results sub-folder; '' = <algorithm>-<dataset>-<timestamp>-<random>.
    overwrite (overwrite): replace an earlier run's results in that folder.
    tensorboard (tensorboard): also write TensorBoard event files.
    wandb_mode (wandb-mode): 'off', 'offline' or 'online' Weights & Biases logging.
    wandb_project (wandb-project): the W&B project.
    """

    out_dir: str = _key("out-dir")
    run_name: str = _key("run-name")
    overwrite: bool = _key("overwrite")
    tensorboard: bool = _key("tensorboard")
    wandb_mode: str = _key("wandb-mode")
    wandb_project: str = _key("wandb-project")


@dataclass(frozen=True)
class ClientStateSettings(Settings):
    """Where persistent client state lives (fedsuite/state.py).

    mode (client-state): 'auto' (memory while it fits budget_mb), 'memory' or 'disk'.
    budget_mb (client-state-budget-mb): memory budget for all clients' state, MiB.
    dir (client-state-dir): folder for on-disk state; '' = a per-run temp folder.
    """

    mode: str = _key("client-state")
    budget_mb: float = _key("client-state-budget-mb")
    dir: str = _key("client-state-dir")


class Config(Mapping):
    """A validated, read-only run config (string keys as in pyproject.toml), with typed views of it.

    `cfg["lr"]` reads one key; the typed settings objects group what the code reads together: `cfg.data`,
    `cfg.synthetic`, `cfg.partitioning`, `cfg.sampling`, `cfg.local`, `cfg.aggregation`, `cfg.evaluation`,
    `cfg.run_control`, `cfg.output`, `cfg.client_state`; `cfg.algorithm`, `cfg.dataset`, `cfg.preset`,
    `cfg.num_clients`, `cfg.seed` and `cfg.model` are the run's identity. Everything is built once, here.
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
        self._evaluation = Evaluation.from_values(v)
        self._run_control = RunControl.from_values(v)
        self._output = Output.from_values(v)
        self._client_state = ClientStateSettings.from_values(v)

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


def similar_keys(name: str, schema: Mapping[str, Key]) -> list[str]:
    """Keys an unknown `name` may have meant: the same words written with '-' (prox_mu → prox-mu, Prox-Mu), keys
    sharing its first word, and near spellings."""
    import difflib

    dashed = name.strip().lower().replace("_", "-").replace(" ", "-")
    if dashed in schema:
        return [dashed]
    first = dashed.split("-")[0]
    close = [k for k in schema if k.split("-")[0] == first]
    close += [k for k in difflib.get_close_matches(dashed, list(schema), n=3, cutoff=0.75) if k not in close]
    return close


def resolve(run_config: Mapping[str, Any] | None = None) -> Config:
    """Defaults overlaid with `run_config` (its `preset` expanded first unless `preset-expanded`), every key
    checked; raises ConfigError listing all problems."""
    # imported here: fedsuite.presets reads this module's schema
    from fedsuite.presets import apply_preset, preset_error

    run_config = dict(run_config or {})
    errors: list[str] = []
    if (err := preset_error(run_config.get("preset", ""))) is not None:
        errors.append(err)
    elif not run_config.get("preset-expanded", False):
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


_PAIR = re.compile(r"""\s*([^\s=]+)=("(?:[^"\\]|\\.)*"|'[^']*'|\[[^\]]*\]|\{[^}]*\}|[^\s"']+)(?=\s|$)""")


def parse_pairs(text: str) -> dict[str, Scalar]:
    """'k1=v1 k2="a b" k3='c'' with TOML values → {k1: v1, k2: 'a b', k3: 'c'}; ValueError naming what is wrong."""
    import tomllib

    pairs: dict[str, Scalar] = {}
    position, text = 0, text.strip()
    while position < len(text):
        match = _PAIR.match(text, position)
        if match is None:
            raise ValueError(f"{text[position:].split()[0]!r} is not key=value")
        key, value = match.groups()
        if key in pairs:
            raise ValueError(f"{key!r} is given twice")
        try:
            pairs[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise ValueError(f"{key}={value}: the value is not TOML (strings in quotes)") from None
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    return pairs


def unpack_plugin_config(run_config: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    """`run_config` with the pairs of `plugin-config` beside the other keys and `plugin-config` emptied (its keys
    now stand on their own, so a resolved config resolves again to itself). A pair that names a built-in key, or a
    key also given directly with another value, is an error."""
    packed = run_config.get(PLUGIN_CONFIG, "")
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


def is_import_path(name: str) -> bool:
    """'package.module:callable' (a user model or data loader)."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr and " " not in name)


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
        if not str(v.get("partition-column", "")).strip():
            errors.append("partition='natural': give partition-column=<the column whose values are the clients>")
        if str(v.get("dataset", "")).startswith("synthetic-"):
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
        if str(v.get("dataset", "")).startswith("synthetic-"):
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
    if "algorithm" in v:  # the algorithm's own rules live next to it, in the registry
        from fedsuite.registry import algorithm_errors

        errors += algorithm_errors(v)
    if v.get("agg-scale") == "1/N" and v.get("weighting") == "samples":
        errors.append("agg-scale='1/N' is the uniform sum Σ_S Δ_i / N; use weighting='uniform' with it")
    if "lowrank-rank" in v and "lowrank-size" in v and int(v["lowrank-rank"]) > int(v["lowrank-size"]):
        errors.append(f"lowrank-rank={v['lowrank-rank']}: must be <= lowrank-size={v['lowrank-size']}")
    try:
        targets = [float(t) for t in str(v.get("targets", "")).split(",") if t.strip()]
        if any(not 0.0 <= t <= 1.0 for t in targets):
            errors.append(f"targets={v['targets']!r}: each target must be an accuracy in [0, 1]")
    except ValueError:
        errors.append(f"targets={v['targets']!r}: expected comma-separated numbers such as '0.7,0.8'")
    return errors


# --- pyproject.toml's [tool.flwr.app.config] table, generated from the schema -----------------------------------

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
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
        f"{PYPROJECT_BEGIN}: every key with its default, generated from the schema in fedsuite/config.py (the only",
        f"# place a default is written) by `{WRITE_COMMAND}`; do not edit by hand.",
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
