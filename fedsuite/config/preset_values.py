"""The presets themselves: named run-config bundles, one per seed's main result table (docs/reference/papers.md),
as data. How a preset is applied and shown is in fedsuite/config/presets.py, which hands these names on.

A preset is `values` (every algorithm) and `per_algorithm` (keys whose value the source gives per method, e.g.
FedDyn's slower lr decay). Precedence: schema defaults < preset values < per-algorithm values < explicit keys.
Every value carries a comment naming the documentation page that gives it: protocol.md and papers.md are under
docs/reference/; index.md (the conventions) and an algorithm's page (fedspeed.md, fedcm.md, …) are under
docs/algorithms/. "[choice]" marks a value the sources leave open and this file fixes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fedsuite.config.keys import Scalar


@dataclass(frozen=True)
class Preset:
    name: str
    description: str  # one line
    source: str  # the paper's table(s) it reproduces
    algorithms: tuple[str, ...]  # the methods of that table
    values: Mapping[str, Scalar]
    per_algorithm: Mapping[str, Mapping[str, Scalar]] = field(default_factory=dict)

    def values_for(self, algorithm: str) -> dict[str, Scalar]:
        """The preset's keys for `algorithm`: the common values overlaid with that method's own."""
        return {**self.values, **self.per_algorithm.get(algorithm, {})}


# ResNet-18-GN on CIFAR with the seeds' common optimisation settings.
_CIFAR_RESNET: dict[str, Scalar] = {
    "model": "resnet18-gn",  # protocol.md: ResNet-18-GN (FedSpeed, FedCM, FL-Simulator; FedMIM, FAdamET: [decision])
    "lr": 0.1,  # protocol.md: η_l^0 = 0.1
    "lr-decay": 0.998,  # protocol.md: γ = 0.998 for most methods
    "server-lr": 1.0,  # protocol.md: η_g = 1
    "weight-decay": 1e-3,  # index.md / protocol.md: wd 1e-3 in all CIFAR seeds
    "clip-norm": 10.0,  # index.md: the reference codes clip every local step to norm 10 (ResNet runs)
    "clip-scope": "reference",  # index.md: the reference form reproduces FL-Simulator/FedDyn numbers
    "partition": "dirichlet",  # protocol.md: balanced Dirichlet (FedSpeed, FedCM, FedMIM)
    "partition-balanced": True,  # protocol.md: every client gets exactly n/N samples
    "partition-alpha": 0.6,  # papers.md: the "DIR" columns are Dir(0.6); partition='iid' gives the IID columns
    "sampling": "bernoulli",  # protocol.md: Bernoulli participation (FedCM, FedMIM, FL-Simulator)
    "fedopt-lr": 0.1,  # fedadam.md: FedAdam η_g = 0.1 (seeds)
    "fedopt-beta1": 0.9,  # fedadam.md: FedCM App. C "α = 0.1" read as 1 − β1
    "fedopt-beta2": 0.99,  # fedadam.md: FL-Simulator β2 = 0.99
    "fedopt-tau": 0.01,  # fedadam.md: τ = 0.01 (FedCM App. C; FL-Simulator ε = 0.01)
    "sam-rho": 0.1,  # fedsam.md: FedSAM/MoFedSAM ρ = 0.1 (FL-Simulator README)
    "fedspeed-rho": 0.1,  # fedspeed.md: ρ0 = 0.1 (thesis Table 4.7 best)
    "fedspeed-alpha": 1.0,  # fedspeed.md: α = 1.0 (thesis Table 4.8; the code hard-wires it)
}

# FedSpeed thesis, 100 clients / p = 0.1 (fedspeed.md hyper-parameters, papers.md Table 4.4 first columns, Table 4.3).
_THESIS_100 = {
    **_CIFAR_RESNET,
    "num-clients": 100,  # papers.md: "100/10 %" = N = 100
    "participation": 0.1,  # papers.md: p = 0.1
    "local-epochs": 5,  # fedspeed.md: E = 5 (N = 100, p = 0.1); papers.md Table 4.4 "E = 5 for C10 100/10 %"
    "batch-size": 50,  # fedspeed.md: B = 50
    "num-server-rounds": 1500,  # papers.md Table 4.4: budget 1500 rounds (CIFAR)
    "algorithm": "fedspeed",
    "fedspeed-mu": 0.1,  # fedspeed.md: μ = 0.1 (N = 100)
    "prox-mu": 0.1,  # fedprox.md: FedProx μ = 0.1 (N = 100, 10 %) in the FedSpeed thesis
    "feddyn-alpha": 0.1,  # feddyn.md: α_d = 0.1 (FedSpeed thesis, 100 clients)
    "fedadmm-rho": 0.1,  # fedadmm.md: ρ = 0.1 (N = 100)
    "fedcm-alpha": 0.1,  # fedcm.md: α = 0.1 for 100-client/10 %/Dir-0.6
}
_THESIS_100_DECAY = {
    # protocol.md: γ = 0.9995 for FedDyn, FedADMM, FedSpeed at N = 100/p = 0.1 (others keep 0.998)
    "feddyn": {"lr-decay": 0.9995},
    "fedadmm": {"lr-decay": 0.9995},
    "fedspeed": {"lr-decay": 0.9995},
    "fedspeed-ing": {"lr-decay": 0.9995},  # fedspeed-ing.md: FedSpeed-Ing is FedSpeed + ζ; [choice] FedSpeed's γ
}

# FedSpeed thesis, 500 clients / p = 0.02 (fedspeed.md, papers.md Tables 4.2, 4.4, 4.5).
_THESIS_500 = {
    **_THESIS_100,
    "num-clients": 500,  # papers.md: "500/2 %" = N = 500
    "participation": 0.02,  # papers.md: p = 0.02
    "local-epochs": 2,  # fedspeed.md: E = 2 (N = 500, p = 0.02)
    "batch-size": 20,  # fedspeed.md: B = 20
    "fedspeed-mu": 0.001,  # fedspeed.md: μ = 0.001 (N = 500)
    "prox-mu": 0.001,  # fedprox.md: FedProx μ = 0.001 (N = 500, 2 %)
    "feddyn-alpha": 0.001,  # feddyn.md: α_d = 0.001 (thesis, 500 clients)
    "fedadmm-rho": 0.001,  # fedadmm.md: ρ = 0.001 (N = 500)
    "fedcm-alpha": 0.05,  # fedcm.md: α = 0.05 otherwise (not 100/10 %)
}
_THESIS_500_DECAY = {
    "feddyn": {"lr-decay": 0.9998},  # protocol.md: γ = 0.9998 for FedDyn and FedSpeed at N = 500/p = 0.02
    "fedspeed": {"lr-decay": 0.9998},  # protocol.md
    "fedadmm": {"lr-decay": 0.9995},  # fedadmm.md: FedADMM γ = 0.9995 per the FedSpeed thesis
}
_THESIS_ALGORITHMS = ("fedavg", "fedprox", "fedadam", "scaffold", "fedcm", "feddyn", "fedadmm", "fedspeed")

# FedCM paper (fedcm.md App. C hyper-parameters, papers.md table): 4000 rounds, Bernoulli, balanced Dirichlet.
_FEDCM = {
    **_CIFAR_RESNET,
    "algorithm": "fedcm",
    "num-server-rounds": 4000,  # fedcm.md / papers.md: 4000 rounds
    "local-epochs": 5,  # fedcm.md: CIFAR-10 E = 5
    "batch-size": 50,  # fedcm.md: B = 50
    "feddyn-alpha": 0.01,  # feddyn.md: FedCM α_d = 0.01 (CIFAR-10)
}
_FEDCM_I = {
    "num-clients": 100,  # papers.md: setting I = 100 clients, p = 10 %, 500 samples per client (protocol.md)
    "participation": 0.1,  # papers.md setting I
}
_FEDCM_II = {
    "num-clients": 500,  # papers.md: setting II = 500 clients, p = 2 %, 100 samples per client (protocol.md)
    "participation": 0.02,  # papers.md setting II
}
_FEDCM_ALGORITHMS = ("fedcm", "fedavg", "fedadam", "scaffold", "feddyn")
_FEDCM_CIFAR100 = {
    "dataset": "cifar100",
    "fedcm-alpha": 0.05,  # fedcm.md: CIFAR-100 α = 0.05
    "local-epochs": 2,  # fedcm.md: CIFAR-100 E = 2
    "batch-size": 20,  # fedcm.md: B = 20 for the baselines other than FedCM/FedAdam
    "targets": "0.4,0.5",  # protocol.md: the thesis' CIFAR-100 targets (FedCM reports final accuracy only)
}
_FEDCM_CIFAR100_B50 = {"batch-size": 50}  # fedcm.md: B = 50 for FedCM and FedAdam on CIFAR-100

# FAdamET paper (its §6.1 hyper-parameters, Table 1; fadamet.md, papers.md).
_FADAMET = {
    "model": "resnet18-gn",  # protocol.md: FAdamET says "ResNet-18" [decision: ResNet-18-GN]
    "algorithm": "fadamet",
    "num-clients": 100,  # fadamet.md: N = 100
    "sampling": "fixed",  # protocol.md: S clients without replacement (FAdamET)
    "clients-per-round": 10,  # fadamet.md: S = 10
    "tracking-clients": 5,  # fadamet.md: Y = 5
    "local-steps": 3,  # fadamet.md / protocol.md: K = 3 local iterations
    "lr": 1e-3,  # fadamet.md: η_l = 1e-3 (Adam-based methods)
    "server-lr": 1.0,  # fadamet.md: η_g = 1
    "adam-beta1": 0.9,  # fadamet.md: (β1, β2) = (0.9, 0.99)
    "adam-beta2": 0.99,  # fadamet.md
    "adam-eps": 1e-8,  # fadamet.md: ε = 1e-8
    "weight-decay": 1e-8,  # fadamet.md / protocol.md: wd 1e-8 (FAdamET)
    "partition": "dirichlet",  # fadamet.md: Dir α = 0.1
    "partition-alpha": 0.1,  # fadamet.md / papers.md: Dir(0.1)
    "partition-balanced": True,  # protocol.md: FAdamET does not say which variant [decision: balanced]
    "fedlada-alpha": 0.1,  # fedlada.md: FedLADA α = 0.1 [decision]
    "num-server-rounds": 3000,  # papers.md Table 1 reports ">3000": [choice] a 3000-round budget
    "batch-size": 50,  # [choice] FAdamET gives no batch size; the other seeds' B = 50 (protocol.md)
    "lr-decay": 1.0,  # [choice] FAdamET gives no lr decay (fadamet.md)
    "clip-norm": 0.0,  # index.md: clipping belongs to FL-Simulator/FedDyn code, not FAdamET
}
_FADAMET_SGD = {"lr": 0.1}  # fadamet.md: SGD baselines η_l = 0.1
_FADAMET_ALGORITHMS = ("fedavg", "scaffold", "localadam", "fedlada", "fadamet", "fadamgt")

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "fedspeed-cifar10-100x10",
            "FedSpeed thesis: CIFAR-10, 100 clients, Bernoulli 10 %, Dir(0.6), E = 5, B = 50, 1500 rounds",
            "FedSpeed thesis Table 4.4 (C10 100/10 %), Table 4.3",
            (*_THESIS_ALGORITHMS, "fedspeed-ing"),
            {
                **_THESIS_100,
                "dataset": "cifar10",
                "targets": "0.8,0.85",  # protocol.md: CIFAR-10 (100 clients, 10 %) 80/85 %
            },
            _THESIS_100_DECAY,
        ),
        Preset(
            "fedspeed-cifar10-500x2",
            "FedSpeed thesis: CIFAR-10, 500 clients, Bernoulli 2 %, Dir(0.6), E = 2, B = 20, 1500 rounds",
            "FedSpeed thesis Tables 4.2, 4.4, 4.5 (C10 500/2 %)",
            _THESIS_ALGORITHMS,
            {
                **_THESIS_500,
                "dataset": "cifar10",
                "targets": "0.75,0.825",  # protocol.md: CIFAR-10 (500, 2 %) 75/82.5 %
            },
            _THESIS_500_DECAY,
        ),
        Preset(
            "fedspeed-cifar100-500x2",
            "FedSpeed thesis: CIFAR-100, 500 clients, Bernoulli 2 %, Dir(0.6), E = 2, B = 20, 1500 rounds",
            "FedSpeed thesis Tables 4.2, 4.4 (C100 500/2 %)",
            _THESIS_ALGORITHMS,
            {
                **_THESIS_500,
                "dataset": "cifar100",
                "targets": "0.4,0.5",  # protocol.md: CIFAR-100 40/50 %
            },
            _THESIS_500_DECAY,
        ),
        Preset(
            "fedcm-cifar10-100x10",
            "FedCM setting I: CIFAR-10, 100 clients × 500 samples, Bernoulli 10 %, Dir(0.6), E = 5, 4000 rounds",
            "FedCM paper, CIFAR-10 setting I",
            _FEDCM_ALGORITHMS,
            {
                **_FEDCM,
                **_FEDCM_I,
                "dataset": "cifar10",
                "fedcm-alpha": 0.1,  # fedcm.md: α = 0.1 for 100-client/10 %/Dir-0.6 (papers.md Table 3 best)
                "targets": "0.8,0.85",  # protocol.md: the thesis' targets for this setting (FedCM gives none)
            },
            {"feddyn": {"lr-decay": 0.9995}},  # protocol.md: FedCM CIFAR-10 γ = 0.9995 for FedDyn
        ),
        Preset(
            "fedcm-cifar10-500x2",
            "FedCM setting II: CIFAR-10, 500 clients × 100 samples, Bernoulli 2 %, Dir(0.6), E = 5, 4000 rounds",
            "FedCM paper, CIFAR-10 setting II",
            _FEDCM_ALGORITHMS,
            {
                **_FEDCM,
                **_FEDCM_II,
                "dataset": "cifar10",
                "fedcm-alpha": 0.05,  # fedcm.md: α = 0.05 otherwise
                "targets": "0.75,0.825",  # protocol.md: the thesis' targets for 500/2 %
            },
            {"feddyn": {"lr-decay": 0.9995}},  # protocol.md: FedCM CIFAR-10 γ = 0.9995 for FedDyn
        ),
        Preset(
            "fedcm-cifar100-100x10",
            "FedCM setting I: CIFAR-100, 100 clients × 500 samples, Bernoulli 10 %, Dir(0.6), E = 2, 4000 rounds",
            "FedCM paper, CIFAR-100 setting I",
            _FEDCM_ALGORITHMS,
            {**_FEDCM, **_FEDCM_I, **_FEDCM_CIFAR100},
            {
                "fedcm": _FEDCM_CIFAR100_B50,
                "fedadam": _FEDCM_CIFAR100_B50,
                "feddyn": {"lr-decay": 0.999},  # protocol.md: FedCM CIFAR-100 γ = 0.999 for FedDyn (α_d: feddyn.md)
            },
        ),
        Preset(
            "fedcm-cifar100-500x2",
            "FedCM setting II: CIFAR-100, 500 clients × 100 samples, Bernoulli 2 %, Dir(0.6), E = 2 (FedCM 5), "
            "4000 rounds",
            "FedCM paper, CIFAR-100 setting II",
            _FEDCM_ALGORITHMS,
            {**_FEDCM, **_FEDCM_II, **_FEDCM_CIFAR100},
            {
                "fedcm": {**_FEDCM_CIFAR100_B50, "local-epochs": 5},  # fedcm.md: E = 5 for FedCM at 500 clients
                "fedadam": _FEDCM_CIFAR100_B50,
                # protocol.md: γ = 0.999 for FedDyn (CIFAR-100); feddyn.md: α_d = 0.001 (CIFAR-100, 500 clients)
                "feddyn": {"lr-decay": 0.999, "feddyn-alpha": 0.001},
            },
        ),
        Preset(
            "fedmim-cifar10-table3",
            "FedMIM Table III: CIFAR-10, 100 clients, Bernoulli 10 %, IID + colour perturbation, E = 5, B = 50, "
            "500 rounds",
            "FedMIM paper Table III (and Table I's protocol)",
            ("fedmim", "fedcm", "fedavg"),
            {
                **_CIFAR_RESNET,
                "algorithm": "fedmim",
                "dataset": "cifar10",
                "colour-perturbation": True,  # protocol.md [decision]: FedMIM's per-client brightness/saturation
                "num-clients": 100,  # papers.md: "most likely N = 100, p = 0.1"
                "participation": 0.1,  # papers.md / protocol.md: FedMIM p ∈ {0.2, 0.1, 0.02}
                "local-epochs": 5,  # papers.md Table III: E = 5
                "batch-size": 50,  # papers.md Table III: B = 50
                "num-server-rounds": 500,  # papers.md Table III: 500 rounds
                "fedmim-alphas": "0.6,0.3",  # fedmim.md / Table III best row (0.6,0.3|0.9,0.1) → 84.98
                "fedmim-betas": "0.9,0.1",  # fedmim.md / Table III best row
                # [choice] Table III states no split; IID is the one consistent with its (0,0|0,0) = 81.61
                # after 500 rounds (Table I FedAvg after 1000 rounds: IID 82.16, Dir-0.3 80.19).
                "partition": "iid",
                "fedcm-alpha": 0.1,  # fedmim.md: FedMIM (α,–|–) rows ≈ FedCM with α = 1 − α_1; fedcm.md α = 0.1
                "feddyn-alpha": 0.1,  # feddyn.md: α_d = 0.1 (FedMIM, 100 clients)
                "targets": "0.8,0.85",  # protocol.md: the thesis' CIFAR-10 100/10 % targets (FedMIM gives none)
            },
        ),
        Preset(
            "fadamet-cifar10",
            "FAdamET Table 1: CIFAR-10, 100 clients, S = 10, Y = 5, K = 3, Dir(0.1), rounds to 75 %",
            "FAdamET paper Table 1 (CIFAR-10)",
            _FADAMET_ALGORITHMS,
            {
                **_FADAMET,
                "dataset": "cifar10",
                "targets": "0.75",  # protocol.md / papers.md: rounds to 75 % (CIFAR-10)
            },
            {"fedavg": _FADAMET_SGD, "scaffold": _FADAMET_SGD},
        ),
        Preset(
            "fadamet-cifar100",
            "FAdamET Table 1: CIFAR-100, 100 clients, S = 10, Y = 5, K = 3, Dir(0.1), rounds to 50 %",
            "FAdamET paper Table 1 (CIFAR-100)",
            _FADAMET_ALGORITHMS,
            {
                **_FADAMET,
                "dataset": "cifar100",
                "targets": "0.5",  # protocol.md / papers.md: rounds to 50 % (CIFAR-100)
            },
            {"fedavg": _FADAMET_SGD, "scaffold": _FADAMET_SGD},
        ),
        Preset(
            "losac-mnist",
            "LoSAC Table II: MNIST 2NN, sort-by-label, 100 clients, S = 10, M = 5 blocks, T = 6, η = 1e-4 (sum), "
            "500 rounds",
            "LoSAC paper Table II (MNIST, M = 5, T = 6 column)",
            ("losac", "scaffold"),
            {
                "algorithm": "losac",
                "dataset": "mnist",  # papers.md: MNIST
                "model": "2nn",  # protocol.md / papers.md: 784-200-200-10 2NN
                "partition": "shards",  # protocol.md / papers.md: non-IID sort-by-label
                "num-clients": 100,  # papers.md: N = 100
                "sampling": "fixed",  # protocol.md: S clients without replacement (LoSAC)
                "clients-per-round": 10,  # papers.md: S = 10
                "local-batches": "blocks",  # losac.md: one step = one of the M blocks, also for the baselines
                "losac-blocks": 5,  # papers.md Table II: M ∈ {2, 3, 5}; [choice] M = 5 (the paper's default M)
                "local-steps": 6,  # papers.md Table II: T ∈ {2, 4, 6}; [choice] T = 6 (largest gap to SCAFFOLD)
                "loss-reduction": "sum",  # losac.md: the paper's η assumes sum-reduced block losses
                "lr": 1e-4,  # papers.md: η = 1e-4
                "lr-decay": 1.0,  # losac.md: no decay is mentioned
                "weight-decay": 0.0,  # losac.md: "wd = 0, none is mentioned"
                "clip-norm": 0.0,  # index.md: no clipping outside the ResNet reference codes
                "server-lr": 1.0,  # losac.md: η_g = 1 by default
                "agg-scale": "mean",  # losac.md: mean_S by default
                "losac-phi-scale": "1",  # losac.md: factor-1 bookkeeping by default
                "num-server-rounds": 500,  # papers.md: accuracy at round 500
                "targets": "0.85",  # protocol.md / papers.md: rounds to 85 %
            },
        ),
        Preset(
            "flsim-cifar10-100x10",
            "FL-Simulator README: CIFAR-10, 100 clients, Bernoulli 10 %, Dir(0.6), E = 5, B = 50, γ = 0.998, "
            "1000 rounds",
            "FL-Simulator README (100/10 %)",
            (
                "fedavg",
                "fedprox",
                "fedadam",
                "scaffold",
                "feddyn",
                "fedcm",
                "mofedsam",
                "fedspeed",
                "fedgamma",
                "fedsmoo",
            ),
            {
                **_CIFAR_RESNET,
                "algorithm": "fedspeed",
                "dataset": "cifar10",
                "num-clients": 100,  # papers.md: 100/10 %
                "participation": 0.1,  # papers.md / protocol.md: FL-Simulator p = 0.1
                "local-epochs": 5,  # papers.md: E 5
                "batch-size": 50,  # papers.md: B 50
                "num-server-rounds": 1000,  # papers.md: 1000 rounds
                "lr-decay": 0.998,  # papers.md / fedspeed.md: FL-Simulator README uses γ = 0.998, FedSpeed included
                "fedspeed-mu": 0.1,  # fedspeed.md: μ = 0.1 at N = 100
                "prox-mu": 0.1,  # fedprox.md: FL-Simulator 0.1 (100 clients)
                "feddyn-alpha": 0.1,  # feddyn.md: α_d = 0.1 at 100 clients
                "fedcm-alpha": 0.1,  # mofedsam.md: FL-Simulator README α = 0.1
                "fedgamma-rho": 0.01,  # fedgamma.md: FL-Simulator README ρ = 0.01 for FedGamma
                "fedsmoo-mu": 0.1,  # fedsmoo.md: FL-Simulator README proxy coefficient 0.1
                "fedsmoo-rho": 0.1,  # fedsmoo.md: FL-Simulator README ρ = 0.1
                "targets": "0.8,0.85",  # protocol.md: the thesis' CIFAR-10 100/10 % targets (the README gives none)
            },
        ),
    )
}

PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
