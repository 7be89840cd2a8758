"""Named run-config bundles, one per seed's main result table (ALGORITHMS.md §5), for `preset=<name>`: the data
and everything done with it.

A preset is `values` (every algorithm) and `per_algorithm` (keys whose value the source gives per method, e.g.
FedDyn's slower lr decay). Precedence: schema defaults < preset values < per-algorithm values < explicit keys.
Every value carries a comment naming the spec line it comes from; "[choice]" marks a value the spec leaves open
and this file fixes.

Two ways a preset is applied:
- `apply_preset` (fedsuite.config.resolve, i.e. the ServerApp/ClientApp): they only see Flower's merged run
  config, where a key equal to its default cannot be told from an unset one, so such a key cannot override the
  preset;
- `expand` (simulation.run/compare/sweep): they know which keys the user gave, so every one of them wins; they
  launch with every preset key written out and `preset-expanded=true`, so the apps do not apply it again.
`describe` prints a resolved config with where each value came from; `presets_table` is README's preset table.
This module reads fedsuite.config's schema; fedsuite.config imports it only inside `resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedsuite.config import SCHEMA, Config, ConfigError, Scalar


@dataclass(frozen=True)
class Preset:
    name: str
    description: str  # one line
    source: str  # the spec table(s) it reproduces
    algorithms: tuple[str, ...]  # the methods of that table
    values: Mapping[str, Scalar]
    per_algorithm: Mapping[str, Mapping[str, Scalar]] = field(default_factory=dict)

    def values_for(self, algorithm: str) -> dict[str, Scalar]:
        """The preset's keys for `algorithm`: the common values overlaid with that method's own."""
        return {**self.values, **self.per_algorithm.get(algorithm, {})}


# ResNet-18-GN on CIFAR with the seeds' common optimisation settings.
_CIFAR_RESNET: dict[str, Scalar] = {
    "model": "resnet18-gn",  # §2.1: ResNet-18-GN (FedSpeed thesis, FedCM, FL-Simulator; FedMIM/FAdamET [decision])
    "lr": 0.1,  # §2.6: η_l^0 = 0.1
    "lr-decay": 0.998,  # §2.6: γ = 0.998 for most methods
    "server-lr": 1.0,  # §2.6: η_g = 1
    "weight-decay": 1e-3,  # §0.3.1 / §2.6: wd 1e-3 in all CIFAR seeds
    "clip-norm": 10.0,  # §0.3.2: the reference codes clip every local step to norm 10 (ResNet runs)
    "clip-scope": "reference",  # §0.3.2: the reference form reproduces FL-Simulator/FedDyn numbers
    "partition": "dirichlet",  # §2.2: balanced Dirichlet (FedSpeed, FedCM, FedMIM)
    "partition-balanced": True,  # §2.2: every client gets exactly n/N samples
    "partition-alpha": 0.6,  # §5.1/§5.2: the "DIR" columns are Dir(0.6); partition='iid' gives the IID columns
    "sampling": "bernoulli",  # §2.4: Bernoulli participation (FedCM, FedMIM, FL-Simulator)
    "fedopt-lr": 0.1,  # §4.3: FedAdam η_g = 0.1 (seeds)
    "fedopt-beta1": 0.9,  # §4.3: FedCM App. C "α = 0.1" read as 1 − β1
    "fedopt-beta2": 0.99,  # §4.3: FL-Simulator β2 = 0.99
    "fedopt-tau": 0.01,  # §4.3: τ = 0.01 (FedCM App. C; FL-Simulator ε = 0.01)
    "sam-rho": 0.1,  # §4.7: FedSAM/MoFedSAM ρ = 0.1 (FL-Simulator README)
    "fedspeed-rho": 0.1,  # §3.1: ρ0 = 0.1 (thesis Table 4.7 best)
    "fedspeed-alpha": 1.0,  # §3.1: α = 1.0 (thesis Table 4.8; the code hard-wires it)
}

# FedSpeed thesis, 100 clients / p = 0.1 (§3.1 hyper-parameters, §5.1 Table 4.4 first columns, Table 4.3).
_THESIS_100 = {
    **_CIFAR_RESNET,
    "num-clients": 100,  # §5.1: "100/10 %" = N = 100
    "participation": 0.1,  # §5.1: p = 0.1
    "local-epochs": 5,  # §3.1: E = 5 (N = 100, p = 0.1); §5.1 Table 4.4 "E = 5 for C10 100/10 %"
    "batch-size": 50,  # §3.1: B = 50
    "num-server-rounds": 1500,  # §5.1 Table 4.4: budget 1500 rounds (CIFAR)
    "algorithm": "fedspeed",
    "fedspeed-mu": 0.1,  # §3.1: μ = 0.1 (N = 100)
    "prox-mu": 0.1,  # §4.2: FedProx μ = 0.1 (N = 100, 10 %) in the FedSpeed thesis
    "feddyn-alpha": 0.1,  # §4.5: α_d = 0.1 (FedSpeed thesis, 100 clients)
    "fedadmm-rho": 0.1,  # §4.6: ρ = 0.1 (N = 100)
    "fedcm-alpha": 0.1,  # §3.3: α = 0.1 for 100-client/10 %/Dir-0.6
}
_THESIS_100_DECAY = {
    # §2.6: γ = 0.9995 for FedDyn, FedADMM, FedSpeed at N = 100/p = 0.1 (others keep 0.998)
    "feddyn": {"lr-decay": 0.9995},
    "fedadmm": {"lr-decay": 0.9995},
    "fedspeed": {"lr-decay": 0.9995},
    "fedspeed-ing": {"lr-decay": 0.9995},  # §3.2: FedSpeed-Ing is FedSpeed + ζ; [choice] FedSpeed's γ
}

# FedSpeed thesis, 500 clients / p = 0.02 (§3.1, §5.1 Tables 4.2, 4.4, 4.5).
_THESIS_500 = {
    **_THESIS_100,
    "num-clients": 500,  # §5.1: "500/2 %" = N = 500
    "participation": 0.02,  # §5.1: p = 0.02
    "local-epochs": 2,  # §3.1: E = 2 (N = 500, p = 0.02)
    "batch-size": 20,  # §3.1: B = 20
    "fedspeed-mu": 0.001,  # §3.1: μ = 0.001 (N = 500)
    "prox-mu": 0.001,  # §4.2: FedProx μ = 0.001 (N = 500, 2 %)
    "feddyn-alpha": 0.001,  # §4.5: α_d = 0.001 (thesis, 500 clients)
    "fedadmm-rho": 0.001,  # §4.6: ρ = 0.001 (N = 500)
    "fedcm-alpha": 0.05,  # §3.3: α = 0.05 otherwise (not 100/10 %)
}
_THESIS_500_DECAY = {
    "feddyn": {"lr-decay": 0.9998},  # §2.6: γ = 0.9998 for FedDyn and FedSpeed at N = 500/p = 0.02
    "fedspeed": {"lr-decay": 0.9998},  # §2.6
    "fedadmm": {"lr-decay": 0.9995},  # §4.6: FedADMM γ = 0.9995 per the FedSpeed thesis
}
_THESIS_ALGORITHMS = ("fedavg", "fedprox", "fedadam", "scaffold", "fedcm", "feddyn", "fedadmm", "fedspeed")

# FedCM paper (§3.3 App. C hyper-parameters, §5.2 table): 4000 rounds, Bernoulli, balanced Dirichlet.
_FEDCM = {
    **_CIFAR_RESNET,
    "algorithm": "fedcm",
    "num-server-rounds": 4000,  # §3.3 / §5.2: 4000 rounds
    "local-epochs": 5,  # §3.3: CIFAR-10 E = 5
    "batch-size": 50,  # §3.3: B = 50
    "feddyn-alpha": 0.01,  # §4.5: FedCM α_d = 0.01 (CIFAR-10)
}
_FEDCM_I = {
    "num-clients": 100,  # §5.2: setting I = 100 clients, p = 10 %, 500 samples per client (§2.2)
    "participation": 0.1,  # §5.2 setting I
}
_FEDCM_II = {
    "num-clients": 500,  # §5.2: setting II = 500 clients, p = 2 %, 100 samples per client (§2.2)
    "participation": 0.02,  # §5.2 setting II
}
_FEDCM_ALGORITHMS = ("fedcm", "fedavg", "fedadam", "scaffold", "feddyn")
_FEDCM_CIFAR100 = {
    "dataset": "cifar100",
    "fedcm-alpha": 0.05,  # §3.3: CIFAR-100 α = 0.05
    "local-epochs": 2,  # §3.3: CIFAR-100 E = 2
    "batch-size": 20,  # §3.3: B = 20 for the baselines other than FedCM/FedAdam
    "targets": "0.4,0.5",  # §2.7: the thesis' CIFAR-100 targets (FedCM reports final accuracy only)
}
_FEDCM_CIFAR100_B50 = {"batch-size": 50}  # §3.3: B = 50 for FedCM and FedAdam on CIFAR-100

# FAdamET paper (§3.5 §6.1 hyper-parameters, §5.4 Table 1).
_FADAMET = {
    "model": "resnet18-gn",  # §2.1: FAdamET says "ResNet-18" [decision: ResNet-18-GN]
    "algorithm": "fadamet",
    "num-clients": 100,  # §3.5: N = 100
    "sampling": "fixed",  # §2.4: S clients without replacement (FAdamET)
    "clients-per-round": 10,  # §3.5: S = 10
    "tracking-clients": 5,  # §3.5: Y = 5
    "local-steps": 3,  # §3.5 / §2.5: K = 3 local iterations
    "lr": 1e-3,  # §3.5: η_l = 1e-3 (Adam-based methods)
    "server-lr": 1.0,  # §3.5: η_g = 1
    "adam-beta1": 0.9,  # §3.5: (β1, β2) = (0.9, 0.99)
    "adam-beta2": 0.99,  # §3.5
    "adam-eps": 1e-8,  # §3.5: ε = 1e-8
    "weight-decay": 1e-8,  # §3.5 / §2.6: wd 1e-8 (FAdamET)
    "partition": "dirichlet",  # §3.5: Dir α = 0.1
    "partition-alpha": 0.1,  # §3.5 / §5.4: Dir(0.1)
    "partition-balanced": True,  # §2.2: FAdamET does not say which variant [decision: balanced]
    "fedlada-alpha": 0.1,  # §3.6: FedLADA α = 0.1 [decision]
    "num-server-rounds": 3000,  # §5.4 Table 1 reports ">3000": [choice] a 3000-round budget
    "batch-size": 50,  # [choice] the spec gives no FAdamET batch size; the seeds' B = 50 (§2.5)
    "lr-decay": 1.0,  # [choice] FAdamET gives no lr decay (§3.5)
    "clip-norm": 0.0,  # §0.3.2: clipping belongs to FL-Simulator/FedDyn code, not FAdamET
}
_FADAMET_SGD = {"lr": 0.1}  # §3.5: SGD baselines η_l = 0.1
_FADAMET_ALGORITHMS = ("fedavg", "scaffold", "localadam", "fedlada", "fadamet", "fadamgt")

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "fedspeed-cifar10-100x10",
            "FedSpeed thesis: CIFAR-10, 100 clients, Bernoulli 10 %, Dir(0.6), E = 5, B = 50, 1500 rounds",
            "ALGORITHMS.md §5.1 Table 4.4 (C10 100/10 %), Table 4.3",
            (*_THESIS_ALGORITHMS, "fedspeed-ing"),
            {
                **_THESIS_100,
                "dataset": "cifar10",
                "targets": "0.8,0.85",  # §2.7: CIFAR-10 (100 clients, 10 %) 80/85 %
            },
            _THESIS_100_DECAY,
        ),
        Preset(
            "fedspeed-cifar10-500x2",
            "FedSpeed thesis: CIFAR-10, 500 clients, Bernoulli 2 %, Dir(0.6), E = 2, B = 20, 1500 rounds",
            "ALGORITHMS.md §5.1 Tables 4.2, 4.4, 4.5 (C10 500/2 %)",
            _THESIS_ALGORITHMS,
            {
                **_THESIS_500,
                "dataset": "cifar10",
                "targets": "0.75,0.825",  # §2.7: CIFAR-10 (500, 2 %) 75/82.5 %
            },
            _THESIS_500_DECAY,
        ),
        Preset(
            "fedspeed-cifar100-500x2",
            "FedSpeed thesis: CIFAR-100, 500 clients, Bernoulli 2 %, Dir(0.6), E = 2, B = 20, 1500 rounds",
            "ALGORITHMS.md §5.1 Tables 4.2, 4.4 (C100 500/2 %)",
            _THESIS_ALGORITHMS,
            {
                **_THESIS_500,
                "dataset": "cifar100",
                "targets": "0.4,0.5",  # §2.7: CIFAR-100 40/50 %
            },
            _THESIS_500_DECAY,
        ),
        Preset(
            "fedcm-cifar10-100x10",
            "FedCM setting I: CIFAR-10, 100 clients × 500 samples, Bernoulli 10 %, Dir(0.6), E = 5, 4000 rounds",
            "ALGORITHMS.md §5.2 (CIFAR-10, setting I)",
            _FEDCM_ALGORITHMS,
            {
                **_FEDCM,
                **_FEDCM_I,
                "dataset": "cifar10",
                "fedcm-alpha": 0.1,  # §3.3: α = 0.1 for 100-client/10 %/Dir-0.6 (§5.2 Table 3 best)
                "targets": "0.8,0.85",  # §2.7: the thesis' targets for this setting (FedCM gives none)
            },
            {"feddyn": {"lr-decay": 0.9995}},  # §2.6: FedCM CIFAR-10 γ = 0.9995 for FedDyn
        ),
        Preset(
            "fedcm-cifar10-500x2",
            "FedCM setting II: CIFAR-10, 500 clients × 100 samples, Bernoulli 2 %, Dir(0.6), E = 5, 4000 rounds",
            "ALGORITHMS.md §5.2 (CIFAR-10, setting II)",
            _FEDCM_ALGORITHMS,
            {
                **_FEDCM,
                **_FEDCM_II,
                "dataset": "cifar10",
                "fedcm-alpha": 0.05,  # §3.3: α = 0.05 otherwise
                "targets": "0.75,0.825",  # §2.7: the thesis' targets for 500/2 %
            },
            {"feddyn": {"lr-decay": 0.9995}},  # §2.6: FedCM CIFAR-10 γ = 0.9995 for FedDyn
        ),
        Preset(
            "fedcm-cifar100-100x10",
            "FedCM setting I: CIFAR-100, 100 clients × 500 samples, Bernoulli 10 %, Dir(0.6), E = 2, 4000 rounds",
            "ALGORITHMS.md §5.2 (CIFAR-100, setting I)",
            _FEDCM_ALGORITHMS,
            {**_FEDCM, **_FEDCM_I, **_FEDCM_CIFAR100},
            {
                "fedcm": _FEDCM_CIFAR100_B50,
                "fedadam": _FEDCM_CIFAR100_B50,
                "feddyn": {"lr-decay": 0.999},  # §2.6: FedCM CIFAR-100 γ = 0.999 for FedDyn; §4.5 α_d = 0.01
            },
        ),
        Preset(
            "fedcm-cifar100-500x2",
            "FedCM setting II: CIFAR-100, 500 clients × 100 samples, Bernoulli 2 %, Dir(0.6), E = 2 (FedCM 5), "
            "4000 rounds",
            "ALGORITHMS.md §5.2 (CIFAR-100, setting II)",
            _FEDCM_ALGORITHMS,
            {**_FEDCM, **_FEDCM_II, **_FEDCM_CIFAR100},
            {
                "fedcm": {**_FEDCM_CIFAR100_B50, "local-epochs": 5},  # §3.3: E = 5 for FedCM at 500 clients
                "fedadam": _FEDCM_CIFAR100_B50,
                # §2.6: γ = 0.999 for FedDyn (CIFAR-100); §4.5: α_d = 0.001 (CIFAR-100, 500 clients)
                "feddyn": {"lr-decay": 0.999, "feddyn-alpha": 0.001},
            },
        ),
        Preset(
            "fedmim-cifar10-table3",
            "FedMIM Table III: CIFAR-10, 100 clients, Bernoulli 10 %, IID + colour perturbation, E = 5, B = 50, "
            "500 rounds",
            "ALGORITHMS.md §5.3 Table III (and Table I's protocol)",
            ("fedmim", "fedcm", "fedavg"),
            {
                **_CIFAR_RESNET,
                "algorithm": "fedmim",
                "dataset": "cifar10",
                "colour-perturbation": True,  # §2.2 [decision]: FedMIM's per-client brightness/saturation
                "num-clients": 100,  # §5.3: "most likely N = 100, p = 0.1"
                "participation": 0.1,  # §5.3 / §2.4: FedMIM p ∈ {0.2, 0.1, 0.02}
                "local-epochs": 5,  # §5.3 Table III: E = 5
                "batch-size": 50,  # §5.3 Table III: B = 50
                "num-server-rounds": 500,  # §5.3 Table III: 500 rounds
                "fedmim-alphas": "0.6,0.3",  # §3.4 / Table III best row (0.6,0.3|0.9,0.1) → 84.98
                "fedmim-betas": "0.9,0.1",  # §3.4 / Table III best row
                # [choice] Table III states no split; IID is the one consistent with its (0,0|0,0) = 81.61
                # after 500 rounds (Table I FedAvg after 1000 rounds: IID 82.16, Dir-0.3 80.19).
                "partition": "iid",
                "fedcm-alpha": 0.1,  # §3.4: FedMIM (α,–|–) rows ≈ FedCM with α = 1 − α_1; §3.3 α = 0.1
                "feddyn-alpha": 0.1,  # §4.5: α_d = 0.1 (FedMIM, 100 clients)
                "targets": "0.8,0.85",  # §2.7: the thesis' CIFAR-10 100/10 % targets (FedMIM gives none)
            },
        ),
        Preset(
            "fadamet-cifar10",
            "FAdamET Table 1: CIFAR-10, 100 clients, S = 10, Y = 5, K = 3, Dir(0.1), rounds to 75 %",
            "ALGORITHMS.md §5.4 Table 1 (CIFAR-10)",
            _FADAMET_ALGORITHMS,
            {
                **_FADAMET,
                "dataset": "cifar10",
                "targets": "0.75",  # §2.7 / §5.4: rounds to 75 % (CIFAR-10)
            },
            {"fedavg": _FADAMET_SGD, "scaffold": _FADAMET_SGD},
        ),
        Preset(
            "fadamet-cifar100",
            "FAdamET Table 1: CIFAR-100, 100 clients, S = 10, Y = 5, K = 3, Dir(0.1), rounds to 50 %",
            "ALGORITHMS.md §5.4 Table 1 (CIFAR-100)",
            _FADAMET_ALGORITHMS,
            {
                **_FADAMET,
                "dataset": "cifar100",
                "targets": "0.5",  # §2.7 / §5.4: rounds to 50 % (CIFAR-100)
            },
            {"fedavg": _FADAMET_SGD, "scaffold": _FADAMET_SGD},
        ),
        Preset(
            "losac-mnist",
            "LoSAC Table II: MNIST 2NN, sort-by-label, 100 clients, S = 10, M = 5 blocks, T = 6, η = 1e-4 (sum), "
            "500 rounds",
            "ALGORITHMS.md §5.5 Table II (MNIST, M = 5, T = 6 column)",
            ("losac", "scaffold"),
            {
                "algorithm": "losac",
                "dataset": "mnist",  # §5.5: MNIST
                "model": "2nn",  # §2.1 / §5.5: 784-200-200-10 2NN
                "partition": "shards",  # §2.2 / §5.5: non-IID sort-by-label
                "num-clients": 100,  # §5.5: N = 100
                "sampling": "fixed",  # §2.4: S clients without replacement (LoSAC)
                "clients-per-round": 10,  # §5.5: S = 10
                "local-batches": "blocks",  # §3.7: one step = one of the M blocks, also for the baselines
                "losac-blocks": 5,  # §5.5 Table II: M ∈ {2, 3, 5}; [choice] M = 5 (the paper's default M)
                "local-steps": 6,  # §5.5 Table II: T ∈ {2, 4, 6}; [choice] T = 6 (largest gap to SCAFFOLD)
                "loss-reduction": "sum",  # §3.7: the paper's η assumes sum-reduced block losses
                "lr": 1e-4,  # §5.5: η = 1e-4
                "lr-decay": 1.0,  # §3.7: no decay is mentioned
                "weight-decay": 0.0,  # §3.7: "wd = 0, none is mentioned"
                "clip-norm": 0.0,  # §0.3.2: no clipping outside the ResNet reference codes
                "server-lr": 1.0,  # §3.7: η_g = 1 by default
                "agg-scale": "mean",  # §3.7: mean_S by default
                "losac-phi-scale": "1",  # §3.7: factor-1 bookkeeping by default
                "num-server-rounds": 500,  # §5.5: accuracy at round 500
                "targets": "0.85",  # §2.7 / §5.5: rounds to 85 %
            },
        ),
        Preset(
            "flsim-cifar10-100x10",
            "FL-Simulator README: CIFAR-10, 100 clients, Bernoulli 10 %, Dir(0.6), E = 5, B = 50, γ = 0.998, "
            "1000 rounds",
            "ALGORITHMS.md §5.6 (FL-Simulator README, 100/10 %)",
            ("fedavg", "fedprox", "fedadam", "scaffold", "feddyn", "fedcm", "mofedsam", "fedspeed"),
            {
                **_CIFAR_RESNET,
                "algorithm": "fedspeed",
                "dataset": "cifar10",
                "num-clients": 100,  # §5.6: 100/10 %
                "participation": 0.1,  # §5.6 / §2.4: FL-Simulator p = 0.1
                "local-epochs": 5,  # §5.6: E 5
                "batch-size": 50,  # §5.6: B 50
                "num-server-rounds": 1000,  # §5.6: 1000 rounds
                "lr-decay": 0.998,  # §5.6 / §3.1: FL-Simulator README uses γ = 0.998, FedSpeed included
                "fedspeed-mu": 0.1,  # §3.1: μ = 0.1 at N = 100
                "prox-mu": 0.1,  # §4.2: FL-Simulator 0.1 (100 clients)
                "feddyn-alpha": 0.1,  # §4.5: α_d = 0.1 at 100 clients
                "fedcm-alpha": 0.1,  # §4.7: FL-Simulator README α = 0.1
                "targets": "0.8,0.85",  # §2.7: the thesis' CIFAR-10 100/10 % targets (the README gives none)
            },
        ),
    )
}

PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)


# --- applying a preset -------------------------------------------------------------------------------------------


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


def expand(overrides: Mapping) -> tuple[dict, dict]:
    """(the overrides to launch with, the keys that came from the preset). The user's keys win over the preset
    even where they equal the default; no preset: the overrides unchanged."""
    overrides = dict(overrides)
    name = overrides.get("preset", "")
    if not name:
        return overrides, {}
    if (err := preset_error(name)) is not None:
        raise ConfigError(err)
    expanded, taken = apply_preset(overrides, explicit=set(overrides))
    return {**expanded, "preset-expanded": True}, taken


# --- showing presets ---------------------------------------------------------------------------------------------


def describe(cfg: Config, from_preset: Mapping, explicit: Mapping) -> str:
    """The resolved config: every key that differs from its default or was set by the preset or -c, with where
    its value came from."""
    name = cfg.preset
    head = "run config"
    if name:
        head += f" (preset {name!r}: {PRESETS[name].description}; {PRESETS[name].source})"
    shown = [k for k in SCHEMA if k != "preset-expanded" and (k in from_preset or k in explicit
             or cfg[k] != SCHEMA[k].default)]  # fmt: skip
    width = max((len(k) for k in shown), default=0)
    preset_keys = PRESETS[name].values_for(cfg.algorithm) if name else {}
    lines = [head + ":"]
    for k in shown:
        if k in explicit:
            over = k in preset_keys and preset_keys[k] != cfg[k]
            origin = f"-c, over the preset's {preset_keys[k]!r}" if over else "-c"
        else:
            origin = "preset" if k in from_preset or k in preset_keys else "default"
        lines.append(f"  {k:<{width}} = {cfg[k]!r:<14} ({origin})")
    lines.append("  (every other key: its default, see README Run-config keys)")
    return "\n".join(lines)


def presets_table() -> str:
    """README's preset table (Markdown)."""
    rows = ["| preset | what | algorithms | rounds | reproduces |", "|---|---|---|---|---|"]
    for p in PRESETS.values():
        algorithms = ", ".join(f"`{a}`" for a in p.algorithms)
        rows.append(f"| `{p.name}` | {p.description} | {algorithms} | {p.values['num-server-rounds']} | {p.source} |")
    return "\n".join(rows)
