"""Run-config schema: every key's default, type, range and allowed values, checked before any training.

`resolve(run_config)` merges Flower's run config over the defaults and returns a `Config`, or raises one
`ConfigError` that lists every bad key with what is allowed. Algorithm hyper-parameters are declared here too
(grouped by the algorithm family that reads them) so that pyproject.toml, README and validation share one list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedsuite.presets import PRESET_NAMES, PRESETS

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

    def check(self, value: Any) -> tuple[Scalar | None, str | None]:
        """Return (converted value, None) or (None, error message)."""
        want = type(self.default)
        if want is bool:
            if not isinstance(value, bool):
                return None, f"{self.name}={value!r}: expected true or false"
        elif want is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return None, f"{self.name}={value!r}: expected an integer"
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
            rng = f"{op} {self.low:g}" + (f" and <= {self.high:g}" if self.high is not None else "")
            return None, f"{self.name}={value!r}: must be {rng}"
        if self.high is not None and value > self.high:
            return None, f"{self.name}={value!r}: must be <= {self.high:g}"
        return value, None


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
PARTITIONS = ("iid", "dirichlet", "shards", "mixture")
LABEL_TRANSFORMS = ("none", "binary")
# Datasets with a binary label rule (ALGORITHMS.md §2.3; the rules live in fedsuite/data/labels.py).
BINARY_LABEL_DATASETS = ("mnist", "fashion-mnist", "har", "esr")
# 3-channel image datasets: where FedMIM's colour perturbation (brightness, saturation; ALGORITHMS.md §2.2) is defined.
COLOUR_DATASETS = ("cifar10", "cifar100", "tinyimagenet")
# Algorithms whose server moves x by η_g·(aggregate of Δ_i), so that agg-scale='1/N' means the literal Σ_S Δ_i / N
# of the LoSAC paper's eq. (13) for every method of that suite (ALGORITHMS.md §3.7).
AGG_SCALE_ALGORITHMS = ("fedavg", "fedprox", "fedsam", "scaffold", "scaffold-prox", "mimesvrg", "losac", "losac-prox",
                        "fedsaga")  # fmt: skip

# Which models fit which dataset; the first is what model="auto" picks.
DATASET_MODELS: dict[str, tuple[str, ...]] = {
    "fashion-mnist": ("cnn", "2nn", "logreg", "resnet18-gn"),
    "mnist": ("cnn", "2nn", "logreg", "resnet18-gn"),
    "cifar10": ("resnet18-gn", "cnn", "logreg"),
    "cifar100": ("resnet18-gn", "cnn", "logreg"),
    "tinyimagenet": ("resnet18-gn", "cnn", "logreg"),
    "har": ("2nn", "logreg"),  # LoSAC's 2NN on 561 features (ALGORITHMS.md §2.1)
    "esr": ("2nn", "logreg"),  # LoSAC's 2NN on 178 features
    "synthetic-lsq": ("linear",),
    "synthetic-logistic": ("logreg",),
    "synthetic-lowrank": ("matrix",),
}

COMMON_KEYS: tuple[Key, ...] = (
    Key("algorithm", "fedavg", "federated optimiser (see the algorithm table)", ALGORITHMS),
    Key("dataset", "fashion-mnist", "training data", DATASETS),
    Key("data-dir", "", "folder with the dataset files; empty = the dataset's default location"),
    Key("download", False, "allow torchvision to download a missing dataset (needs a network)"),
    Key("label-transform", "none", "none = the dataset's classes; binary = the 2-class relabelling of "
        "ALGORITHMS.md §2.3 (mnist ≤ 5, fashion-mnist ≤ 4, har ≤ 3 → 0, else 1; esr is binary either way)",
        LABEL_TRANSFORMS),
    Key("preset", "", "named bundle of run-config keys for a seed's main table (README Presets, ALGORITHMS.md §5); "
        "empty = none. Keys given explicitly win; under a bare `flwr run` a key counts as explicit only when it "
        "differs from its default"),
    Key("preset-expanded", False, "set by simulation.run/compare: the run config already holds the preset's "
        "values with the -c keys applied, so the apps do not apply the preset again"),
    Key("model", "auto", "network; auto = the dataset's default (first in DATASET_MODELS)", MODELS),
    Key("colour-perturbation", False, "FedMIM's per-client colour shift: client i draws b_i, s_i ~ U[0.6, 1.4] "
        "from (seed, partition) and applies adjust_brightness(b_i), then adjust_saturation(s_i) to its training "
        "images (ALGORITHMS.md §2.2); test set untouched; 3-channel image datasets only"),
    Key("num-clients", 100, "N, number of clients (partitions); any number of SuperNodes trains them", low=1),
    Key("client-mapping", "logical", "logical = each message names its partition and any SuperNode trains it (the "
        "number of SuperNodes is a parallelism setting); fixed = one SuperNode per partition, tied to it by its "
        "--node-config partition-id (deployment)", ("logical", "fixed")),
    Key("partition", "dirichlet", "how training data is split across clients (ALGORITHMS.md §2.2)", PARTITIONS),
    Key("partition-alpha", 0.3, "Dirichlet concentration α", low=0.0, low_open=True),
    Key("partition-balanced", True, "Dirichlet with equal client sizes (FedDyn routine) or per-class split"),
    Key("partition-mixture", 0.5, "c of the c % mixture partition (share of label-sorted data)", low=0.0, high=1.0),
    Key("sampling", "fixed", "client sampling per round (ALGORITHMS.md §2.4)", ("fixed", "bernoulli")),
    Key("clients-per-round", 10, "S for sampling=fixed", low=1),
    Key("participation", 0.1, "p for sampling=bernoulli", low=0.0, high=1.0, low_open=True),
    Key("num-server-rounds", 20, "T, number of rounds", low=1),
    Key("local-epochs", 2, "E, local epochs (used when local-steps = 0)", low=1),
    Key("local-steps", 0, "K, fixed local steps per round; 0 = epoch mode", low=0),
    Key("batch-size", 50, "B; 0 = full local batch", low=0),
    Key("lr", 0.05, "η_l^0, local learning rate", low=0.0, low_open=True),
    Key("lr-decay", 1.0, "γ, per-round local lr decay η_l^t = η_l^0 γ^t", low=0.0, high=1.0, low_open=True),
    Key("weight-decay", 0.0, "coupled L2 added to every local step (ALGORITHMS.md §0.3)", low=0.0),
    Key("clip-norm", 0.0, "clip each local step's gradient to this L2 norm; 0 = off", low=0.0),
    Key("clip-scope", "clean", "what clip-norm clips: clean = loss gradient + linear corrections; reference = also "
        "the −μ·centre half of every prox term, as FL-Simulator/FedDyn code (ALGORITHMS.md §0.3.2)",
        ("clean", "reference")),
    Key("local-batches", "minibatch", "what one local step trains on: minibatch = B samples (epochs or K draws); "
        "blocks = one of the client's M fixed data blocks (losac-blocks), drawn uniformly, as LoSAC/FedSaga always "
        "do and the LoSAC suite's baselines do (ALGORITHMS.md §3.7)", ("minibatch", "blocks")),
    Key("loss-reduction", "mean", "local loss over a minibatch or block: mean, or sum (the LoSAC paper's step sizes "
        "assume sum, ALGORITHMS.md §3.7)", ("mean", "sum")),
    Key("agg-scale", "mean", "server move: mean = η_g·mean_S(Δ_i); 1/N = η_g·Σ_S Δ_i / N, the LoSAC paper's eq. (13), "
        "for the algorithms of that suite (ALGORITHMS.md §3.7)", ("mean", "1/N")),
    Key("server-lr", 1.0, "η_g for averaging algorithms (1 = plain averaging)", low=0.0, low_open=True),
    Key("weighting", "uniform", "aggregation weights over the cohort (ALGORITHMS.md §0.3)", ("uniform", "samples")),
    Key("seed", 0, "run seed: partition, cohorts, init, minibatches", low=0),
    Key("eval-every", 1, "centralised evaluation every r rounds (the last round always)", low=1),
    Key("eval-batch-size", 1000, "batch size of server-side evaluation", low=1),
    Key("targets", "0.7,0.75,0.8", "comma-separated accuracy targets for rounds-to-target"),
    Key("out-dir", "results", "results root; relative paths are taken from the project directory"),
    Key("run-name", "", "results sub-folder; empty = <algorithm>-<dataset>-<timestamp>-<random>"),
    Key("overwrite", False, "replace the results of an earlier run in out-dir/run-name (else that is an error)"),
    Key("min-replies", 0.5, "share of each round's cohort that must reply validly, else the run stops as failed "
        "(0 = go on with any number, a round without replies keeps x)", low=0.0, high=1.0),
    Key("round-timeout", 0.0, "seconds a round waits for a client's reply before counting it as failed (Flower's "
        "round_timeout; in a deployment the only end for a hung client on a healthy SuperNode); 0 = no limit",
        low=0.0),
    Key("divergence-factor", 100.0, "stop as diverged when the test loss exceeds this multiple of the initial "
        "loss (0 = only non-finite models and losses)", low=0.0),
    Key("device", "auto", "where clients and server compute", ("auto", "cpu", "cuda")),
    Key("autocast", "none", "local training forward pass: none = float32; bf16 = bfloat16 autocast (GPU speed "
        "option; changes the numbers)", ("none", "bf16")),
    Key("channels-last", False, "4-D inputs in NHWC memory order for local training (GPU speed option)"),
    Key("client-threads", 1, "torch threads per client process", low=1),
    Key("synthetic-dim", 20, "d of the synthetic federation", low=1),
    Key("synthetic-samples", 50, "samples per client of the synthetic federation", low=1),
    Key("synthetic-heterogeneity", 1.0, "spread of client optima and feature scales", low=0.0),
    Key("synthetic-noise", 0.1, "label noise std of the synthetic federation", low=0.0),
    Key("lowrank-size", 64, "synthetic-lowrank: side of the square matrix X (ALGORITHMS.md §3.7)", low=1),
    Key("lowrank-rank", 4, "synthetic-lowrank: rank r of the ground truth X_G = diag(I_r, 0) (§3.7)", low=0),
    Key("client-state", "auto", "where persistent client state lives (auto: memory while it fits the budget)",
        ("auto", "memory", "disk")),
    Key("client-state-budget-mb", 4096.0, "memory budget for all clients' state (auto mode)", low=0.0),
    Key("client-state-dir", "", "folder for on-disk client state (client-state=disk); empty = a per-run temp folder"),
    Key("checkpoint-every", 0, "write a checkpoint (global model, server state, results, client state) into the "
        "results folder every r rounds and after the last; 0 = never", low=0),
    Key("resume-from", "", "results folder of a run with a checkpoint: continue it from there (num-server-rounds "
        "may be larger); every other key that changes the numbers must be the same"),
)  # fmt: skip

# Hyper-parameters by family; the registry says which algorithm reads which.
ALGORITHM_KEYS: tuple[Key, ...] = (
    Key("prox-mu", 0.01, "FedProx μ, gradient term μ(x − x^t) (ALGORITHMS.md §4.2)", low=0.0),
    Key("fedopt-lr", 0.1, "FedAdam/FedYogi/FedAdagrad server lr η_g (§4.3)", low=0.0, low_open=True),
    Key("fedopt-beta1", 0.9, "FedOpt β1 (§4.3)", low=0.0, high=1.0),
    Key("fedopt-beta2", 0.99, "FedOpt β2 (FedAdam/FedYogi) (§4.3)", low=0.0, high=1.0),
    Key("fedopt-tau", 0.01, "FedOpt adaptivity τ (§4.3)", low=0.0, low_open=True),
    Key("scaffold-option", 2, "SCAFFOLD control-variate update: 2 = from the displacement, 1 = full local pass (§4.4)",
        low=1, high=2),
    Key("feddyn-alpha", 0.1, "FedDyn α_d (§4.5)", low=0.0, low_open=True),
    Key("dual-storage", "client", "FedDyn/FedSpeed duals held by clients, or mirrored on the server (+1 d down)",
        ("client", "server")),
    Key("fedadmm-rho", 0.1, "FedADMM ρ (§4.6)", low=0.0, low_open=True),
    Key("fedadmm-variant", "wang", "FedADMM reading: wang = consensus ADMM (exact), gong = Gong et al. (§4.6)",
        ("wang", "gong")),
    Key("fedcm-alpha", 0.1, "FedCM/MoFedSAM α, weight of the local gradient (§3.3)", low=0.0, high=1.0,
        low_open=True),
    Key("sam-rho", 0.1, "FedSAM/MoFedSAM ascent radius ρ (§4.7)", low=0.0),
    Key("fedspeed-mu", 0.1, "FedSpeed prox weight μ = 1/λ (§3.1)", low=0.0, low_open=True),
    Key("fedspeed-rho", 0.1, "FedSpeed normalised ascent radius ρ0 (§3.1)", low=0.0),
    Key("fedspeed-alpha", 1.0, "FedSpeed perturbation weight α: g̃ = (1−α)g1 + αg2 (§3.1)", low=0.0, high=1.0),
    Key("fedspeed-dual-agg", "all", "FedSpeed dual aggregation: all = code form, sampled = thesis form (§3.1)",
        ("all", "sampled")),
    Key("fedspeed-ing-zeta", 0.1, "FedSpeed-Ing extrapolation ζ (§3.2)", low=0.0),
    Key("fedspeed-ing-dual-agg", "all", "FedSpeed-Ing dual aggregation: all = as FedSpeed (ζ = 0 is FedSpeed), "
        "sampled = the thesis' Alg. 3 (§3.2)",
        ("all", "sampled")),
    Key("fedmim-alphas", "0.6,0.3", "FedMIM α_j, newest first; J = their count, Σα_j < 1 (§3.4)"),
    Key("fedmim-betas", "0.9,0.1", "FedMIM β_j, newest first, as many as α_j (§3.4)"),
    Key("adam-beta1", 0.9, "local Adam β1 of LocalAdam, FAdamET/GT and FedLADA; m is reset every round (§3.5)",
        low=0.0, high=1.0),
    Key("adam-beta2", 0.99, "local Adam β2; v_i persists per client (LocalAdam, FAdamET/GT) (§3.5)", low=0.0,
        high=1.0),
    Key("adam-eps", 1e-8, "local Adam ε in m/(√v̂ + ε) (§3.5)", low=0.0, low_open=True),
    Key("tracking-clients", 0, "FAdamET/GT: |Y^t|, sampled clients that refresh y_i each round (at most |S^t|); "
        "0 = half of the realised cohort, at least 1 (§3.5)", low=0),
    Key("losac-blocks", 5, "M, fixed equal data blocks per client, fixed from the run seed; LoSAC/FedSaga keep one "
        "stored block gradient each (M·d client state) (§3.7)", low=1),
    Key("losac-phi-scale", "1", "LoSAC server estimate: 1 = ϕ ← ϕ + Σ_S Δϕ_i (exact, ϕ = Σ_N ḡ_n); N/S = the paper's "
        "eq. (13) factor (§3.7)", ("1", "N/S")),
    Key("prox-penalty", "l1", "LoSAC-Prox/SCAFFOLD-Prox Ψ: l1 = λ‖x‖₁ (soft threshold); nuclear = λ‖X‖_* of every "
        "matrix-shaped parameter (SVD shrinkage) (§3.7)", ("l1", "nuclear")),
    Key("prox-lambda", 0.01, "λ of the proximal penalty Ψ (LoSAC-Prox, SCAFFOLD-Prox) (§3.7)", low=0.0),
    Key("fedlada-alpha", 0.1, "FedLADA α, weight of the local Adam direction against the global g_a (§3.6)",
        low=0.0, high=1.0),
)  # fmt: skip

SCHEMA: dict[str, Key] = {k.name: k for k in COMMON_KEYS + ALGORITHM_KEYS}


class Config(Mapping):
    """A validated, read-only run config (string keys as in pyproject.toml)."""

    def __init__(self, values: Mapping[str, Scalar]):
        self._values = dict(values)

    def __getitem__(self, key: str) -> Scalar:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"

    @property
    def model(self) -> str:
        """The concrete model name (resolves model='auto')."""
        name = str(self["model"])
        return DATASET_MODELS[str(self["dataset"])][0] if name == "auto" else name

    @property
    def targets(self) -> list[float]:
        return [float(t) for t in str(self["targets"]).split(",") if t.strip()]

    @property
    def is_synthetic(self) -> bool:
        return str(self["dataset"]).startswith("synthetic-")


def float_list(text: str) -> tuple[float, ...]:
    return tuple(float(t) for t in text.split(",") if t.strip())


def preset_error(name: Any) -> str | None:
    """The error for an unknown `preset` value, or None (empty = no preset)."""
    if name == "" or (isinstance(name, str) and name in PRESETS):
        return None
    return f"preset={name!r}: unknown preset; allowed are {', '.join(PRESET_NAMES)} (or '' for none)"


def apply_preset(run_config: Mapping[str, Any], explicit: set[str] | None = None) -> tuple[dict, dict]:
    """`run_config` with its preset's keys filled in, and the keys that came from the preset.

    Precedence: defaults < preset values < the preset's per-algorithm values < explicit keys. `explicit` names
    the keys the user gave (simulation.run knows them); None (the ServerApp/ClientApp, which only see Flower's
    merged run config) takes every key whose value differs from its schema default as explicit, so there an
    explicit value that equals the default cannot override a preset. No preset, or an unknown one (resolve
    reports it): `run_config` unchanged."""
    values = dict(run_config)
    name = values.get("preset", "")
    if not name or preset_error(name):
        return values, {}
    if explicit is None:
        explicit = {k for k, v in values.items() if k in SCHEMA and k != "preset" and v != SCHEMA[k].default}
    preset = PRESETS[name]
    algorithm = values["algorithm"] if "algorithm" in explicit else preset.values.get("algorithm", "fedavg")
    taken = {k: v for k, v in preset.values_for(str(algorithm)).items() if k not in explicit}
    return {**values, **taken}, taken


def resolve(run_config: Mapping[str, Any] | None = None) -> Config:
    """Defaults overlaid with `run_config` (its `preset` expanded first unless `preset-expanded`), every key
    checked; raises ConfigError listing all problems."""
    run_config = dict(run_config or {})
    errors: list[str] = []
    if (err := preset_error(run_config.get("preset", ""))) is not None:
        errors.append(err)
    elif not run_config.get("preset-expanded", False):
        run_config, _ = apply_preset(run_config)
    values: dict[str, Scalar] = {}
    for name in sorted(set(run_config) - set(SCHEMA)):
        close = [k for k in SCHEMA if k.split("-")[0] == name.split("-")[0]]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        errors.append(f"{name}: unknown key{hint}")
    for name, key in SCHEMA.items():
        value, err = key.check(run_config.get(name, key.default))
        if err:
            errors.append(err)
        else:
            values[name] = value
    errors += _cross_checks(values)
    if errors:
        raise ConfigError("invalid run config:\n  " + "\n  ".join(errors))
    return Config(values)


def _cross_checks(v: dict[str, Scalar]) -> list[str]:
    """Checks that relate keys; each runs only when the keys it reads passed their own checks."""
    errors = []
    fits = DATASET_MODELS.get(str(v.get("dataset")), ())
    if "model" in v and "dataset" in v and v["model"] != "auto" and v["model"] not in fits:
        errors.append(
            f"model={v['model']!r} does not fit dataset={v['dataset']!r}: allowed are auto, {', '.join(fits)}"
        )
    if v.get("label-transform") == "binary" and "dataset" in v and v["dataset"] not in BINARY_LABEL_DATASETS:
        errors.append(
            f"label-transform='binary' is not defined for dataset={v['dataset']!r}: allowed datasets are "
            f"{', '.join(BINARY_LABEL_DATASETS)} (ALGORITHMS.md §2.3); use label-transform='none'"
        )
    if v.get("colour-perturbation") is True and "dataset" in v and v["dataset"] not in COLOUR_DATASETS:
        errors.append(
            f"colour-perturbation=true is defined for 3-channel images only: allowed datasets are "
            f"{', '.join(COLOUR_DATASETS)} (ALGORITHMS.md §2.2), not dataset={v['dataset']!r}"
        )
    has = all(k in v for k in ("sampling", "clients-per-round", "num-clients"))
    if has and v["sampling"] == "fixed" and int(v["clients-per-round"]) > int(v["num-clients"]):
        errors.append(f"clients-per-round={v['clients-per-round']}: must be <= num-clients={v['num-clients']} (S <= N)")
    if v.get("agg-scale") == "1/N" and "algorithm" in v and v["algorithm"] not in AGG_SCALE_ALGORITHMS:
        errors.append(f"agg-scale='1/N': defined for {', '.join(AGG_SCALE_ALGORITHMS)} (the LoSAC suite); "
                      f"algorithm={v['algorithm']!r} allows mean")  # fmt: skip
    if v.get("agg-scale") == "1/N" and v.get("weighting") == "samples":
        errors.append("agg-scale='1/N' is the uniform sum Σ_S Δ_i / N; use weighting='uniform' with it")
    if "lowrank-rank" in v and "lowrank-size" in v and int(v["lowrank-rank"]) > int(v["lowrank-size"]):
        errors.append(f"lowrank-rank={v['lowrank-rank']}: must be <= lowrank-size={v['lowrank-size']}")
    if v.get("algorithm") == "fedspeed-ing" and v.get("dual-storage") == "server":
        errors.append("dual-storage='server': fedspeed-ing keeps its duals ĝ_i, ǧ_i on the clients; use client")
    if "fedmim-alphas" in v and "fedmim-betas" in v:
        try:
            alphas, betas = float_list(str(v["fedmim-alphas"])), float_list(str(v["fedmim-betas"]))
            if not alphas or len(alphas) != len(betas) or sum(alphas) >= 1.0 or min(alphas + betas) < 0:
                errors.append(
                    f"fedmim-alphas={v['fedmim-alphas']!r}, fedmim-betas={v['fedmim-betas']!r}: need the same "
                    "number (J ≥ 1) of non-negative weights with sum of alphas < 1"
                )
        except ValueError:
            errors.append("fedmim-alphas / fedmim-betas: expected comma-separated numbers such as '0.6,0.3'")
    try:
        targets = [float(t) for t in str(v.get("targets", "")).split(",") if t.strip()]
        if any(not 0.0 <= t <= 1.0 for t in targets):
            errors.append(f"targets={v['targets']!r}: each target must be an accuracy in [0, 1]")
    except ValueError:
        errors.append(f"targets={v['targets']!r}: expected comma-separated numbers such as '0.7,0.8'")
    return errors
