"""The built-in algorithms: their registry entries, with their run-config keys, own config checks and tuning
ranges, written exactly as a plug-in writes its own (fedsuite/registry/entry.py). fedsuite/registry/known.py starts
from them.

Rule and client classes are named as "module:Class" and imported only when an algorithm is built or its
declarations are read, so config validation stays light. README's and docs/algorithms/index.md's algorithm tables
and docs/reference/run-config.md are generated from these entries (`python -m simulation.algorithms --write`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedsuite.config.schema import Key, float_list
from fedsuite.config.settings import value_of
from fedsuite.config.tunable import LogRange, Search
from fedsuite.privacy.settings import ClientPrivacy
from fedsuite.registry.entry import Algorithm
from fedsuite.systems.deadline import Deadline
from fedsuite.systems.work import LocalWork

# The built-ins' hyper-parameters, by family; each entry below lists the ones it reads (_keys).
KEYS: tuple[Key, ...] = (
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
    Key("fedsmoo-mu", 0.1, "FedSMOO prox weight μ (FL-Simulator's --lamb; docs/algorithms/fedsmoo.md)", low=0.0,
        low_open=True),
    Key("fedsmoo-rho", 0.1, "FedSMOO perturbation radius ρ of the dynamic-dual SAM point and of s "
        "(docs/algorithms/fedsmoo.md)", low=0.0),
    Key("fedgamma-rho", 0.1, "FedGAMMA normalised ascent radius ρ (docs/algorithms/fedgamma.md)", low=0.0),
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
    Key("losac-phi-scale", "1", "LoSAC server estimate: 1 = ϕ ← ϕ + Σ_S Δϕ_i (exact, ϕ = Σ_N ḡ_n); N/S = the paper's "
        "eq. (13) factor (docs/algorithms/losac.md)", ("1", "N/S")),
    Key("prox-penalty", "l1", "LoSAC-Prox/SCAFFOLD-Prox Ψ: l1 = λ‖x‖₁ (soft threshold); nuclear = λ‖X‖_* of every "
        "matrix-shaped parameter (SVD shrinkage; docs/algorithms/losac-prox.md)", ("l1", "nuclear"), client=True),
    Key("prox-lambda", 0.01, "λ of the proximal penalty Ψ (LoSAC-Prox, SCAFFOLD-Prox; "
        "docs/algorithms/losac-prox.md)", low=0.0, client=True),
    Key("fedlada-alpha", 0.1, "FedLADA α, weight of the local Adam direction against the global g_a "
        "(docs/algorithms/fedlada.md)",
        low=0.0, high=1.0),
    Key("fedavgm-beta", 0.9, "FedAvgM server momentum β: v ← β v + mean_S Δ_i (docs/algorithms/fedavgm.md)",
        low=0.0, high=1.0, high_open=True),
    Key("fedexp-eps", 1e-3, "FedExP ε in η_g = max(1, mean_S ‖Δ_i‖² / (2(‖Δ̄‖² + |S| ε))), decayed as lr-decay² "
        "(docs/algorithms/fedexp.md)", low=0.0, low_open=True),
    Key("fedexp-eval-average", True, "FedExP: evaluate (x^{t+1} + x^t)/2, the authors' reporting; training "
        "continues from x^{t+1} (docs/algorithms/fedexp.md)"),
)  # fmt: skip

# read by the client through its config rather than a constructor argument (the proximal step's Ψ)
_PROX_KEYS = ("prox-penalty", "prox-lambda")


def _entry(name: str, strategy: str, client: str, section: str, summary: str,
           strategy_args: Mapping[str, str] | None = None, client_args: Mapping[str, str] | None = None,
           reads: tuple[str, ...] = (), **more: Any) -> Algorithm:  # fmt: skip
    """A built-in entry whose `keys` are the built-in keys it reads: those its constructor arguments map to, and
    `reads` (keys its client takes from the config)."""
    strategy_args, client_args = dict(strategy_args or {}), dict(client_args or {})
    names = set(strategy_args.values()) | set(client_args.values()) | set(reads)
    keys = tuple(key for key in KEYS if key.name in names)
    return Algorithm(name, strategy, client, section, summary, strategy_args, client_args, keys=keys, **more)


def _duals_on_clients_only(values: Mapping[str, Any]) -> str | None:
    if values.get("dual-storage") == "server":
        return "dual-storage='server': fedspeed-ing keeps its duals ĝ_i, ǧ_i on the clients; use client"
    return None


def _fedsmoo_duals_on_clients(values: Mapping[str, Any]) -> str | None:
    if values.get("dual-storage") == "server":
        return "dual-storage='server': fedsmoo keeps its duals ĝ_i and ν_i on the clients; use client"
    return None


def _full_gradient_in_mean_scale(what: str, when: Callable[[Mapping[str, Any]], bool]):
    """A rule for an algorithm that builds a correction from a full local gradient of the mean loss: under
    loss-reduction='sum' the steps are |ξ| times larger, so the correction would be off by the batch size."""

    def check(values: Mapping[str, Any]) -> str | None:
        if values.get("loss-reduction") == "sum" and when(values):
            return (f"loss-reduction='sum' with {what}: its correction is a full gradient of the mean loss, the steps "
                    f"are sum-scaled; use loss-reduction='mean'")  # fmt: skip
        return None

    return check


def _fedmim_weights(values: Mapping[str, Any]) -> str | None:
    """FedMIM's α_j and β_j: as many of each (J ≥ 1), non-negative, Σα_j < 1 (docs/algorithms/fedmim.md)."""
    if "fedmim-alphas" not in values or "fedmim-betas" not in values:
        return None
    try:
        alphas, betas = float_list(str(values["fedmim-alphas"])), float_list(str(values["fedmim-betas"]))
    except ValueError:
        return "fedmim-alphas / fedmim-betas: expected comma-separated numbers such as '0.6,0.3'"
    if not alphas or len(alphas) != len(betas) or sum(alphas) >= 1.0 or min(alphas + betas) < 0:
        return (f"fedmim-alphas={values['fedmim-alphas']!r}, fedmim-betas={values['fedmim-betas']!r}: need the same "
                "number (J ≥ 1) of non-negative weights with sum of alphas < 1")  # fmt: skip
    return None


def _secagg_needs(what: str, when: Callable[[Mapping[str, Any]], bool], why: str):
    """A config-dependent refusal of secure aggregation (secagg=true, docs/privacy-secagg.md): under `what` the
    server needs more than the cohort's sums of the uploads, because `why`."""

    def check(values: Mapping[str, Any]) -> str | None:
        if values.get("secagg") and when(values):
            return f"secagg=true with {what}: {why}"
        return None

    return check


_SECAGG_SERVER_DUALS = _secagg_needs(
    "dual-storage='server'",
    lambda v: v.get("dual-storage") == "server",
    "the server adds each client's Δ_i to its own row of a per-client table; use dual-storage='client'",
)


def _poisson_dp_server_duals(values: Mapping[str, Any]) -> str | None:
    """Client-level DP with Poisson sampling (docs/privacy.md) moves the model by noise alone in a round that drew
    nobody, which a per-client table of duals on the server has no row for."""
    if (
        ClientPrivacy.from_values(values).on
        and values.get("sampling") == "bernoulli"
        and values.get("dual-storage") == "server"
    ):
        return (
            f"dp={values['dp']!r} with sampling='bernoulli' needs dual-storage='client': a round that drew "
            "nobody releases noise alone, which a table of per-client duals on the server has no row for"
        )
    return None


_SERVER_DUALS = (_SECAGG_SERVER_DUALS, _poisson_dp_server_duals)  # FedDyn's and FedSpeed's dual-storage='server'
_SECAGG_STEPS = _secagg_needs(
    "local-steps=0",
    lambda v: v.get("local-steps") == 0,
    "the server averages Δ_i / K_i with each client's own step count K_i, which a sum cannot give; set local-steps",
)
_SECAGG_UNEQUAL_WORK = _secagg_needs(
    "local-work='uniform' or 'per-round'",
    lambda v: LocalWork.from_values(v).on,
    "the server weighs each Δ_i by its own step count K_i, which a sum cannot give; use local-work='equal'",
)
_SECAGG_PARTIAL_DEADLINE = _secagg_needs(
    "round-deadline > 0 and deadline-policy='partial'",
    lambda v: (deadline := Deadline.from_values(v)).on and deadline.policy == "partial",
    "a straggler takes the steps that fit, and the server weighs each Δ_i by its own step count K_i, which a sum "
    "cannot give; use deadline-policy='drop' (docs/running/systems.md)",
)
# the server divides each Δ_i by the client's own K_i (FedCM, MoFedSAM, FedLADA, FedNova): K_i must be equal
_SECAGG_OWN_STEPS = (_SECAGG_STEPS, _SECAGG_UNEQUAL_WORK, _SECAGG_PARTIAL_DEADLINE)
_SECAGG_TRACKING = ("uploads delta_y from the tracking subset only: the cohort's uploads differ in shape, and the "
                    "server needs the sum over that subset")  # fmt: skip

_SCAFFOLD_OPTION_1 = _full_gradient_in_mean_scale("scaffold-option=1", lambda v: v.get("scaffold-option") == 1)
_DP_SGD_BLOCKS = "its steps train on fixed data blocks and keep their gradients in a table"


def _scaffold_option_1_under_dp_sgd(values: Mapping[str, Any]) -> str | None:
    if values.get("dp-sgd") is True and values.get("scaffold-option") == 1:
        return "dp-sgd=true: scaffold-option=1 uploads a full local gradient without noise; use scaffold-option=2"
    return None


_MIME_SVRG = _full_gradient_in_mean_scale("algorithm='mimesvrg'", lambda v: True)


def _mime_svrg_reference_point(values: Mapping[str, Any]) -> str | None:
    """MimeSVRG's correction g(x) − g(x^t) + c needs its steps to start where the query took the full gradients."""
    if value_of(values, "relaxed-init") > 0:
        return ("relaxed-init > 0 with algorithm='mimesvrg': its correction g(x) − g(x^t) + c takes the full gradients "
                "at the server's x^t, not at a relaxed start; set relaxed-init=0")  # fmt: skip
    return None


_FEDOPT_ARGS = {"server_lr": "fedopt-lr", "beta1": "fedopt-beta1", "beta2": "fedopt-beta2", "tau": "fedopt-tau"}

_ADAM = {"beta1": "adam-beta1", "beta2": "adam-beta2", "eps": "adam-eps"}
_TRACKING = {"server_lr": "server-lr", "tracking_clients": "tracking-clients"}

_LOSAC = {"server_lr": "server-lr", "phi_scale": "losac-phi-scale"}


_SPEED_CLIENT = {"mu": "fedspeed-mu", "rho": "fedspeed-rho", "mix": "fedspeed-alpha"}
_MIM = {"alphas": "fedmim-alphas", "betas": "fedmim-betas"}
_SMOO_CLIENT = {"mu": "fedsmoo-mu", "rho": "fedsmoo-rho"}

# What simulation.tune searches per algorithm (fedsuite.config.tunable): the local step size and the one or two values
# its
# paper tunes. Value lists follow the grids the sources report where there is one (each algorithm's page), else
# [choice] values around the seeds' defaults; lr ranges are [choice]: SGD-type local steps 0.005–0.5, Adam-type
# 3e-4–3e-2. A space stays small (about 20 grid points): a method with two values besides lr gets two of each.
_SGD_LR = LogRange(0.005, 0.5)
_ADAM_LR = LogRange(3e-4, 3e-2)
_SGD: dict[str, Search] = {"lr": _SGD_LR}
_FEDPROX_TUNED = {**_SGD, "prox-mu": (0.001, 0.01, 0.1, 0.5, 1.0)}  # the FedProx paper's μ grid
_FEDOPT_TUNED = {**_SGD, "fedopt-lr": (0.01, 0.03, 0.1, 0.3, 1.0)}  # server η_g (Reddi et al.)
_FEDDYN_TUNED = {**_SGD, "feddyn-alpha": (0.001, 0.01, 0.1)}  # the FedDyn paper's α grid
_FEDADMM_TUNED = {**_SGD, "fedadmm-rho": (0.001, 0.01, 0.1, 0.5)}  # ρ: 0.001 … 0.1 as in the sources, and 0.5
_FEDCM_TUNED = {**_SGD, "fedcm-alpha": (0.05, 0.1, 0.2, 0.5)}  # α: the FedCM paper uses 0.05 / 0.1
_SAM_TUNED = {**_SGD, "sam-rho": (0.01, 0.05, 0.1, 0.2)}  # ρ: the papers use 0.1
# MoFedSAM tunes FedCM's α and SAM's ρ: the README's α = 0.1 and a large local weight 0.5; ρ = 0.1 and 0.05
_MOFEDSAM_TUNED = {**_SGD, "fedcm-alpha": (0.1, 0.5), "sam-rho": (0.05, 0.1)}
# ρ0 around the thesis' Table 4.7 best (0.1); μ = 1/λ at the thesis' two settings (0.1 at 100 clients, 0.001 at 500)
_FEDSPEED_TUNED = {**_SGD, "fedspeed-rho": (0.05, 0.1), "fedspeed-mu": (0.001, 0.1)}
_FEDSPEED_ING_TUNED = {**_SGD, "fedspeed-ing-zeta": (0.05, 0.1, 0.2, 0.5)}  # the FedSpeed thesis' ζ sweep
# ρ: FL-Simulator's README uses 0.1 for FedSMOO and 0.01 for FedGAMMA; FedSMOO's prox μ (the README's 0.1) at
# FedSpeed's two values, as FedSMOO is FedSpeed with another SAM point
_FEDSMOO_TUNED = {**_SGD, "fedsmoo-rho": (0.05, 0.1), "fedsmoo-mu": (0.001, 0.1)}
_FEDGAMMA_TUNED = {**_SGD, "fedgamma-rho": (0.01, 0.05, 0.1, 0.2)}
# FedMIM's Table III ablates α and β: α pairs from little momentum (A = 0.6) to its best (A = 0.1); β newest-first
# (its best, 0.9, 0.1) and the reverse order it compares against
_FEDMIM_TUNED = {**_SGD, "fedmim-alphas": ("0.3,0.1", "0.6,0.3"), "fedmim-betas": ("0.9,0.1", "0.1,0.9")}
_ADAM_TUNED = {"lr": _ADAM_LR, "adam-eps": (1e-8, 1e-6, 1e-4, 1e-2)}  # ε: the FAdamET paper uses 1e-8
_FEDLADA_TUNED = {"lr": _ADAM_LR, "fedlada-alpha": (0.05, 0.1, 0.2, 0.5)}  # FedLADA's α
_PROX_TUNED = {**_SGD, "prox-lambda": (0.001, 0.01, 0.1)}  # λ: the LoSAC paper tunes it on {1e-3, 1e-2, 1e-1}
_FEDAVGM_TUNED = {**_SGD, "fedavgm-beta": (0.5, 0.7, 0.9, 0.95)}  # β: Hsu et al. sweep β up to 0.997; 0.9 usual
_FEDEXP_TUNED = {**_SGD, "fedexp-eps": (1e-3, 1e-2, 1e-1)}  # ε: the authors use 1e-3 (CIFAR) and 1e-1 (EMNIST)
_FEDEXP_NORMS = "computes its server step size from each client's ‖Δ_i‖²"
_FEDPAQ_REFUSES = {"dp": "its quantized uploads may be longer than the clip the server's noise is sized to; run fedavg "
                         "with compress-up='qsgd' and dp='clients' instead", "secagg": "uploads QSGD's bytes, which "
                   "SecAgg+'s sum of dense masked vectors cannot carry"}  # fmt: skip


BUILT_IN: tuple[Algorithm, ...] = (
    _entry("fedavg", "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedavg.md",
           "local SGD, server averages displacements", {"server_lr": "server-lr"}, sum_scale=True,
           tunable=_SGD),
    _entry("fedprox", "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedprox:FedProxClient",
           "docs/algorithms/fedprox.md",
           "FedAvg + client prox term μ(x − x^t)", {"server_lr": "server-lr"}, {"mu": "prox-mu"},
           sum_scale=True, tunable=_FEDPROX_TUNED),
    _entry("fedadam", "fedsuite.strategies.fedopt:FedAdam", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedadam.md",
           "server Adam on mean displacement, no bias correction", _FEDOPT_ARGS, tunable=_FEDOPT_TUNED),
    _entry("fedyogi", "fedsuite.strategies.fedopt:FedYogi", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedyogi.md",
           "server Yogi on mean displacement", _FEDOPT_ARGS, tunable=_FEDOPT_TUNED),
    _entry("fedadagrad", "fedsuite.strategies.fedopt:FedAdagrad", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedadagrad.md",
           "server Adagrad on mean displacement", _FEDOPT_ARGS, tunable=_FEDOPT_TUNED),
    _entry("scaffold", "fedsuite.strategies.scaffold:Scaffold", "fedsuite.clients.scaffold:ScaffoldClient",
           "docs/algorithms/scaffold.md",
           "control variates: step g − c_i + c; client keeps c_i", {"server_lr": "server-lr"},
           {"option": "scaffold-option"}, sum_scale=True, checks=(_SCAFFOLD_OPTION_1, _scaffold_option_1_under_dp_sgd),
           tunable=_SGD),
    _entry("feddyn", "fedsuite.strategies.feddyn:FedDyn", "fedsuite.clients.feddyn:FedDynClient",
           "docs/algorithms/feddyn.md",
           "dynamic regulariser: step g − ∇L_i + α(x − x^t)", {"dual_storage": "dual-storage"},
           {"alpha": "feddyn-alpha", "dual_storage": "dual-storage"}, checks=_SERVER_DUALS, tunable=_FEDDYN_TUNED),
    _entry("fedadmm", "fedsuite.strategies.fedadmm:FedADMM", "fedsuite.clients.fedadmm:FedADMMClient",
           "docs/algorithms/fedadmm.md",
           "primal-dual: step g + λ_i + ρ(x − x^t); consensus (wang) or gong",
           {"variant": "fedadmm-variant", "server_lr": "server-lr"},
           {"rho": "fedadmm-rho", "variant": "fedadmm-variant"}, tunable=_FEDADMM_TUNED),
    _entry("fedcm", "fedsuite.strategies.fedcm:FedCM", "fedsuite.clients.fedcm:FedCMClient",
           "docs/algorithms/fedcm.md",
           "client-level momentum: step α g + (1 − α) D", {"server_lr": "server-lr"}, {"alpha": "fedcm-alpha"},
           checks=_SECAGG_OWN_STEPS, tunable=_FEDCM_TUNED),
    _entry("fedsam", "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedsam:FedSAMClient",
           "docs/algorithms/fedsam.md",
           "FedAvg with the gradient at the SAM point", {"server_lr": "server-lr"}, {"rho": "sam-rho"},
           sum_scale=True, tunable=_SAM_TUNED),
    _entry("mofedsam", "fedsuite.strategies.fedcm:FedCM", "fedsuite.clients.fedsam:MoFedSAMClient",
           "docs/algorithms/mofedsam.md",
           "FedCM with the gradient at the SAM point", {"server_lr": "server-lr"},
           {"alpha": "fedcm-alpha", "rho": "sam-rho"}, checks=_SECAGG_OWN_STEPS, tunable=_MOFEDSAM_TUNED),
    _entry("fedspeed", "fedsuite.strategies.fedspeed:FedSpeed", "fedsuite.clients.fedspeed:FedSpeedClient",
           "docs/algorithms/fedspeed.md",
           "FedDyn's correction + prox with a normalised SAM gradient",
           {"dual_storage": "dual-storage", "dual_agg": "fedspeed-dual-agg"},
           {**_SPEED_CLIENT, "dual_storage": "dual-storage", "dual_agg": "fedspeed-dual-agg"},
           checks=_SERVER_DUALS, tunable=_FEDSPEED_TUNED),
    _entry("fedspeed-ing", "fedsuite.strategies.fedspeed:FedSpeedIng",
           "fedsuite.clients.fedspeed_ing:FedSpeedIngClient",
           "docs/algorithms/fedspeed-ing.md",
           "FedSpeed + inertial prox centre x̃ and extrapolated correction (our reading)",
           {"zeta": "fedspeed-ing-zeta", "dual_agg": "fedspeed-ing-dual-agg"},
           {**_SPEED_CLIENT, "zeta": "fedspeed-ing-zeta", "dual_agg": "fedspeed-ing-dual-agg"},
           checks=(_duals_on_clients_only,), tunable=_FEDSPEED_ING_TUNED),
    _entry("fedsmoo", "fedsuite.strategies.fedsmoo:FedSMOO", "fedsuite.clients.fedsmoo:FedSMOOClient",
           "docs/algorithms/fedsmoo.md",
           "FedSpeed with the dynamic-dual SAM point (DRegSAM) and the server's global perturbation s",
           {"rho": "fedsmoo-rho"}, _SMOO_CLIENT, reads=("dual-storage",), checks=(_fedsmoo_duals_on_clients,),
           tunable=_FEDSMOO_TUNED),
    _entry("fedgamma", "fedsuite.strategies.scaffold:Scaffold", "fedsuite.clients.fedgamma:FedGammaClient",
           "docs/algorithms/fedgamma.md",
           "SCAFFOLD with the gradient at the normalised SAM point", {"server_lr": "server-lr"},
           {"rho": "fedgamma-rho"}, tunable=_FEDGAMMA_TUNED),
    _entry("fedmim", "fedsuite.strategies.fedmim:FedMIM", "fedsuite.clients.fedmim:FedMIMClient",
           "docs/algorithms/fedmim.md",
           "multi-step inertial momentum: look-ahead gradient, move along a_t",
           {**_MIM, "server_lr": "server-lr"}, _MIM, checks=(_fedmim_weights,), tunable=_FEDMIM_TUNED),
    _entry("localadam", "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.localadam:LocalAdamClient",
           "docs/algorithms/localadam.md",
           "local AMSGrad (m reset per round, no bias correction), client keeps v_i", {"server_lr": "server-lr"},
           _ADAM, tunable=_ADAM_TUNED),
    _entry("fadamet", "fedsuite.strategies.fadam:FAdam", "fedsuite.clients.fadamet:FAdamETClient",
           "docs/algorithms/fadamet.md",
           "LocalAdam + tracking y − y_i added after the Adam moments; Y^t ⊆ S^t refresh y_i", _TRACKING,
           _ADAM, tunable=_ADAM_TUNED, refuses={"secagg": _SECAGG_TRACKING}),
    _entry("fadamgt", "fedsuite.strategies.fadam:FAdam", "fedsuite.clients.fadamgt:FAdamGTClient",
           "docs/algorithms/fadamgt.md",
           "LocalAdam + tracking y − y_i added to the gradient before the Adam moments", _TRACKING,
           _ADAM, tunable=_ADAM_TUNED, refuses={"secagg": _SECAGG_TRACKING}),
    _entry("fedlada", "fedsuite.strategies.fedlada:FedLADA", "fedsuite.clients.fedlada:FedLADAClient",
           "docs/algorithms/fedlada.md",
           "local Adam from the mean v̄, move α·Adam + (1 − α)·g_a (reconstructed from the paper)",
           {"server_lr": "server-lr"}, {"alpha": "fedlada-alpha", **_ADAM}, checks=_SECAGG_OWN_STEPS,
           tunable=_FEDLADA_TUNED),
    _entry("mimesvrg", "fedsuite.strategies.mimesvrg:MimeSVRG", "fedsuite.clients.mimesvrg:MimeSVRGClient",
           "docs/algorithms/mimesvrg.md",
           "two exchanges: full gradients → c, then steps g(x) − g(x^t) + c", {"server_lr": "server-lr"},
           sum_scale=True, checks=(_MIME_SVRG, _mime_svrg_reference_point), tunable=_SGD,
           refuses={"dp": "sends each client's full local gradient to the server before training (its query), a "
                          "second upload per round that the joint clip does not bound",
                    "dp-sgd": "its server query uploads the full local gradient without noise",
                    "secagg": "sends each client's full local gradient to the server before training (its query), "
                              "one client at a time, outside any secure sum"}),
    _entry("losac", "fedsuite.strategies.losac:LoSAC", "fedsuite.clients.losac:LoSACClient",
           "docs/algorithms/losac.md",
           "per-block gradient table y_ij + global estimate ϕ: step G_j + ϕ/N − y_ij",
           _LOSAC, sum_scale=True, tunable=_SGD, refuses={"dp-sgd": _DP_SGD_BLOCKS}),
    _entry("fedsaga", "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedsaga:FedSagaClient",
           "docs/algorithms/fedsaga.md",
           "LoSAC's loop with the local table only: step G_j − y_ij + mean_j y_ij",
           {"server_lr": "server-lr"}, sum_scale=True, tunable=_SGD, refuses={"dp-sgd": _DP_SGD_BLOCKS}),
    _entry("losac-prox", "fedsuite.strategies.losac:LoSAC", "fedsuite.clients.losac_prox:LoSACProxClient",
           "docs/algorithms/losac-prox.md",
           "LoSAC + proximal step prox_ηΨ (ℓ1 or nuclear norm) after each move",
           _LOSAC, reads=_PROX_KEYS, sum_scale=True, tunable=_PROX_TUNED, refuses={"dp-sgd": _DP_SGD_BLOCKS}),
    _entry("scaffold-prox", "fedsuite.strategies.scaffold:Scaffold",
           "fedsuite.clients.scaffold_prox:ScaffoldProxClient",
           "docs/algorithms/scaffold-prox.md", "SCAFFOLD + the same proximal step", {"server_lr": "server-lr"},
           {"option": "scaffold-option"}, reads=_PROX_KEYS, sum_scale=True,
           checks=(_SCAFFOLD_OPTION_1, _scaffold_option_1_under_dp_sgd), tunable=_PROX_TUNED),
    _entry("fednova", "fedsuite.strategies.fednova:FedNova", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fednova.md",
           "FedAvg with each Δ_i normalised by its K_i, rescaled by τ_eff = Σ p_i K_i", {"server_lr": "server-lr"},
           checks=_SECAGG_OWN_STEPS, tunable=_SGD),
    _entry("fedavgm", "fedsuite.strategies.fedavgm:FedAvgM", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedavgm.md",
           "server momentum: v ← β v + mean_S Δ_i, x ← x + η_g v", {"beta": "fedavgm-beta", "server_lr": "server-lr"},
           tunable=_FEDAVGM_TUNED),
    _entry("fedexp", "fedsuite.strategies.fedexp:FedExP", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedexp.md",
           "adaptive server extrapolation: x ← x + η_g Δ̄, η_g = max(1, mean ‖Δ_i‖² / 2(‖Δ̄‖² + |S|ε))",
           {"eps": "fedexp-eps", "eval_average": "fedexp-eval-average"}, tunable=_FEDEXP_TUNED,
           refuses={"secagg": f"{_FEDEXP_NORMS}, which a secure sum of the uploads cannot give",
                    "dp": f"{_FEDEXP_NORMS}, a statistic of the single uploads outside the noisy sum the accountant "
                          "covers"}),
    _entry("fedpaq", "fedsuite.strategies.fedavg:FedAvg", "fedsuite.clients.fedavg:FedAvgClient",
           "docs/algorithms/fedpaq.md",
           "FedAvg with QSGD-quantized uploads of Δ_i (s = compress-up-levels), periodic averaging",
           {"server_lr": "server-lr"}, tunable=_SGD, refuses=_FEDPAQ_REFUSES, key_defaults={"compress-up": "qsgd"}),
)  # fmt: skip
