"""Algorithm name → (server rule, client half, which run-config keys feed which constructor argument).

Rule and client classes are imported only when an algorithm is built or its declarations are read, so config
validation stays light. What an algorithm costs is derived from its declarations, never written twice: the client
state per client from the client's `state_specs` (fedsuite.declared), the d-vectors per round from the rule's
`sends`, `sends_each`, `uplink`, `uplink_some` and `query`. README's and docs/algorithms/index.md's
algorithm tables are generated from this table (`python -m simulation.algorithms --write`). Other packages add
algorithms through the entry-point group `fedsuite.algorithms` or `register(...)` (fedsuite.plugins);
fedsuite.testing is their verification kit.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsuite.config import Config, Key, float_list, resolve
from fedsuite.declared import StateSpec, units
from fedsuite.plugins import AlgorithmRegistry
from fedsuite.sampling import Sampler
from fedsuite.tunable import LogRange, Search


@dataclass(frozen=True)
class Algorithm:
    name: str
    strategy: str  # the server rule, "module:Class"
    client: str
    section: str  # where it is described: its page docs/algorithms/<name>.md (a plug-in: its own reference)
    summary: str
    strategy_args: dict[str, str] = field(default_factory=dict)  # constructor kwarg -> run-config key
    client_args: dict[str, str] = field(default_factory=dict)
    # agg-scale='1/N' (the LoSAC paper's eq. (13), Σ_S Δ_i / N) is defined for the algorithms of that suite, whose
    # server moves x by η_g·(aggregate of Δ_i), so that a comparison uses it for all of them (docs/algorithms/losac.md)
    sum_scale: bool = False
    checks: tuple[Callable[[Mapping[str, Any]], str | None], ...] = ()  # the algorithm's own config rules
    keys: tuple[Key, ...] = ()  # run-config keys the algorithm adds (a plug-in's hyper-parameters)
    # what simulation.tune searches: run-config key -> LogRange or a tuple of values (fedsuite.tunable); every
    # algorithm declares at least `lr`, and every value lies inside its key's schema range
    tunable: Mapping[str, Search] = field(default_factory=dict)

    def client_state(self, cfg: Config | None = None) -> tuple[StateSpec, ...]:
        """The client's declared persistent state under `cfg` (default: the schema defaults)."""
        cfg = _config(cfg, self.name)
        return _load(self.client).state_specs(cfg)

    def client_state_vectors(self, cfg: Config | None = None) -> int:
        """Persistent d-vectors per client."""
        return units(self.client_state(cfg))

    def communication(self, cfg: Config | None = None) -> tuple[int, int, int]:
        """(d-vectors down, d-vectors up) per participating client per round, and the extra d-vectors up from the
        clients that return `uplink_some` (FAdamET/GT's tracking subset), from the rule's declarations."""
        cfg = _config(cfg, self.name)
        sampler = Sampler(cfg.num_clients, "fixed", 1)
        rule = build_rule(cfg, _probe_settings(sampler))
        query = 1 if rule.query is not None else 0
        return 1 + len(rule.sends) + len(rule.sends_each) + query, len(rule.uplink) + query, len(rule.uplink_some)

    @property
    def vectors(self) -> tuple[int, int]:
        """d-vectors down / up per participating client per round, at the defaults."""
        return self.communication()[:2]

    @property
    def tracking_up(self) -> int:
        return self.communication()[2]


def _config(cfg: Config | None, algorithm: str) -> Config:
    if not isinstance(cfg, Config) or cfg["algorithm"] != algorithm:
        return resolve({**(dict(cfg) if cfg is not None else {}), "algorithm": algorithm, "preset": ""})
    return cfg


def _probe_settings(sampler: Sampler):
    from strategies.base import RuleSettings

    return RuleSettings(initial_x=np.zeros(1, np.float32), sampler=sampler, lr=1.0)


def extra_keys() -> tuple[Key, ...]:
    """The run-config keys registered algorithms add to the schema (fedsuite.config.active_schema)."""
    return tuple(key for algo in ALGORITHMS.values() for key in algo.keys)


def algorithm_errors(values: Mapping[str, Any]) -> list[str]:
    """The chosen algorithm's own config rules (run by fedsuite.config.resolve after every key passed its check)."""
    algo = ALGORITHMS.get(str(values["algorithm"]))
    if algo is None:
        return []
    errors = []
    if values.get("agg-scale") == "1/N" and not algo.sum_scale:
        allowed = ", ".join(name for name, a in ALGORITHMS.items() if a.sum_scale)
        errors.append(f"agg-scale='1/N': defined for {allowed} (the LoSAC suite); algorithm={algo.name!r} allows mean")
    return errors + [problem for check in algo.checks if (problem := check(values)) is not None]


def _duals_on_clients_only(values: Mapping[str, Any]) -> str | None:
    if values.get("dual-storage") == "server":
        return "dual-storage='server': fedspeed-ing keeps its duals ĝ_i, ǧ_i on the clients; use client"
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


_SCAFFOLD_OPTION_1 = _full_gradient_in_mean_scale("scaffold-option=1", lambda v: v.get("scaffold-option") == 1)
_MIME_SVRG = _full_gradient_in_mean_scale("algorithm='mimesvrg'", lambda v: True)


_FEDOPT_ARGS = {"server_lr": "fedopt-lr", "beta1": "fedopt-beta1", "beta2": "fedopt-beta2", "tau": "fedopt-tau"}

_ADAM = {"beta1": "adam-beta1", "beta2": "adam-beta2", "eps": "adam-eps"}
_TRACKING = {"server_lr": "server-lr", "tracking_clients": "tracking-clients"}

_LOSAC = {"server_lr": "server-lr", "phi_scale": "losac-phi-scale"}


_SPEED_CLIENT = {"mu": "fedspeed-mu", "rho": "fedspeed-rho", "mix": "fedspeed-alpha"}
_MIM = {"alphas": "fedmim-alphas", "betas": "fedmim-betas"}
_LIST_ARGS = {"alphas", "betas"}  # comma-separated run-config strings → tuples of floats

# What simulation.tune searches per algorithm (fedsuite.tunable): the local step size and the main hyper-parameter.
# Value lists follow the grids the sources report where there is one (each algorithm's page), else [choice] values
# around the seeds' defaults; lr ranges are [choice]: SGD-type local steps 0.005–0.5, Adam-type 3e-4–3e-2.
_SGD_LR = LogRange(0.005, 0.5)
_ADAM_LR = LogRange(3e-4, 3e-2)
_SGD: dict[str, Search] = {"lr": _SGD_LR}
_FEDPROX_TUNED = {**_SGD, "prox-mu": (0.001, 0.01, 0.1, 0.5, 1.0)}  # the FedProx paper's μ grid
_FEDOPT_TUNED = {**_SGD, "fedopt-lr": (0.01, 0.03, 0.1, 0.3, 1.0)}  # server η_g (Reddi et al.)
_FEDDYN_TUNED = {**_SGD, "feddyn-alpha": (0.001, 0.01, 0.1)}  # the FedDyn paper's α grid
_FEDADMM_TUNED = {**_SGD, "fedadmm-rho": (0.001, 0.01, 0.1, 0.5)}  # ρ: 0.001 … 0.1 as in the sources, and 0.5
_FEDCM_TUNED = {**_SGD, "fedcm-alpha": (0.05, 0.1, 0.2, 0.5)}  # α: the FedCM paper uses 0.05 / 0.1
_SAM_TUNED = {**_SGD, "sam-rho": (0.01, 0.05, 0.1, 0.2)}  # ρ: the papers use 0.1
_FEDSPEED_TUNED = {**_SGD, "fedspeed-rho": (0.02, 0.05, 0.1, 0.2)}  # ρ0: FedSpeed thesis Table 4.7, best 0.1
_FEDSPEED_ING_TUNED = {**_SGD, "fedspeed-ing-zeta": (0.05, 0.1, 0.2, 0.5)}  # the FedSpeed thesis' ζ sweep
# FedMIM's α pairs (β = 0.9, 0.1 kept) from little momentum (A = 0.6) to Table III's best (A = 0.1) and A = 0.05
_FEDMIM_TUNED = {**_SGD, "fedmim-alphas": ("0.3,0.1", "0.5,0.2", "0.6,0.3", "0.7,0.25")}
_ADAM_TUNED = {"lr": _ADAM_LR, "adam-eps": (1e-8, 1e-6, 1e-4, 1e-2)}  # ε: the FAdamET paper uses 1e-8
_FEDLADA_TUNED = {"lr": _ADAM_LR, "fedlada-alpha": (0.05, 0.1, 0.2, 0.5)}  # FedLADA's α
_PROX_TUNED = {**_SGD, "prox-lambda": (0.001, 0.01, 0.1)}  # λ: the LoSAC paper tunes it on {1e-3, 1e-2, 1e-1}

ALGORITHMS: AlgorithmRegistry = AlgorithmRegistry(
    (
        Algorithm("fedavg", "strategies.fedavg:FedAvg", "clients.fedavg:FedAvgClient", "docs/algorithms/fedavg.md",
                  "local SGD, server averages displacements", {"server_lr": "server-lr"}, sum_scale=True,
                  tunable=_SGD),
        Algorithm("fedprox", "strategies.fedavg:FedAvg", "clients.fedprox:FedProxClient", "docs/algorithms/fedprox.md",
                  "FedAvg + client prox term μ(x − x^t)", {"server_lr": "server-lr"}, {"mu": "prox-mu"},
                  sum_scale=True, tunable=_FEDPROX_TUNED),
        Algorithm("fedadam", "strategies.fedopt:FedAdam", "clients.fedavg:FedAvgClient", "docs/algorithms/fedadam.md",
                  "server Adam on mean displacement, no bias correction", _FEDOPT_ARGS, tunable=_FEDOPT_TUNED),
        Algorithm("fedyogi", "strategies.fedopt:FedYogi", "clients.fedavg:FedAvgClient", "docs/algorithms/fedyogi.md",
                  "server Yogi on mean displacement", _FEDOPT_ARGS, tunable=_FEDOPT_TUNED),
        Algorithm("fedadagrad", "strategies.fedopt:FedAdagrad", "clients.fedavg:FedAvgClient",
                  "docs/algorithms/fedadagrad.md",
                  "server Adagrad on mean displacement", _FEDOPT_ARGS, tunable=_FEDOPT_TUNED),
        Algorithm("scaffold", "strategies.scaffold:Scaffold", "clients.scaffold:ScaffoldClient",
                  "docs/algorithms/scaffold.md",
                  "control variates: step g − c_i + c; client keeps c_i", {"server_lr": "server-lr"},
                  {"option": "scaffold-option"}, sum_scale=True, checks=(_SCAFFOLD_OPTION_1,), tunable=_SGD),
        Algorithm("feddyn", "strategies.feddyn:FedDyn", "clients.feddyn:FedDynClient", "docs/algorithms/feddyn.md",
                  "dynamic regulariser: step g − ∇L_i + α(x − x^t)", {"dual_storage": "dual-storage"},
                  {"alpha": "feddyn-alpha", "dual_storage": "dual-storage"}, tunable=_FEDDYN_TUNED),
        Algorithm("fedadmm", "strategies.fedadmm:FedADMM", "clients.fedadmm:FedADMMClient",
                  "docs/algorithms/fedadmm.md",
                  "primal-dual: step g + λ_i + ρ(x − x^t); consensus (wang) or gong",
                  {"variant": "fedadmm-variant", "server_lr": "server-lr"},
                  {"rho": "fedadmm-rho", "variant": "fedadmm-variant"}, tunable=_FEDADMM_TUNED),
        Algorithm("fedcm", "strategies.fedcm:FedCM", "clients.fedcm:FedCMClient", "docs/algorithms/fedcm.md",
                  "client-level momentum: step α g + (1 − α) D", {"server_lr": "server-lr"}, {"alpha": "fedcm-alpha"},
                  tunable=_FEDCM_TUNED),
        Algorithm("fedsam", "strategies.fedavg:FedAvg", "clients.fedsam:FedSAMClient", "docs/algorithms/fedsam.md",
                  "FedAvg with the gradient at the SAM point", {"server_lr": "server-lr"}, {"rho": "sam-rho"},
                  sum_scale=True, tunable=_SAM_TUNED),
        Algorithm("mofedsam", "strategies.fedcm:FedCM", "clients.fedsam:MoFedSAMClient", "docs/algorithms/mofedsam.md",
                  "FedCM with the gradient at the SAM point", {"server_lr": "server-lr"},
                  {"alpha": "fedcm-alpha", "rho": "sam-rho"}, tunable=_FEDCM_TUNED),
        Algorithm("fedspeed", "strategies.fedspeed:FedSpeed", "clients.fedspeed:FedSpeedClient",
                  "docs/algorithms/fedspeed.md",
                  "FedDyn's correction + prox with a normalised SAM gradient",
                  {"dual_storage": "dual-storage", "dual_agg": "fedspeed-dual-agg"},
                  {**_SPEED_CLIENT, "dual_storage": "dual-storage", "dual_agg": "fedspeed-dual-agg"},
                  tunable=_FEDSPEED_TUNED),
        Algorithm("fedspeed-ing", "strategies.fedspeed:FedSpeedIng", "clients.fedspeed_ing:FedSpeedIngClient",
                  "docs/algorithms/fedspeed-ing.md",
                  "FedSpeed + inertial prox centre x̃ and extrapolated correction (our reading)",
                  {"zeta": "fedspeed-ing-zeta", "dual_agg": "fedspeed-ing-dual-agg"},
                  {**_SPEED_CLIENT, "zeta": "fedspeed-ing-zeta", "dual_agg": "fedspeed-ing-dual-agg"},
                  checks=(_duals_on_clients_only,), tunable=_FEDSPEED_ING_TUNED),
        Algorithm("fedmim", "strategies.fedmim:FedMIM", "clients.fedmim:FedMIMClient", "docs/algorithms/fedmim.md",
                  "multi-step inertial momentum: look-ahead gradient, move along a_t",
                  {**_MIM, "server_lr": "server-lr"}, _MIM, checks=(_fedmim_weights,), tunable=_FEDMIM_TUNED),
        Algorithm("localadam", "strategies.fedavg:FedAvg", "clients.localadam:LocalAdamClient",
                  "docs/algorithms/localadam.md",
                  "local AMSGrad (m reset per round, no bias correction), client keeps v_i", {"server_lr": "server-lr"},
                  _ADAM, tunable=_ADAM_TUNED),
        Algorithm("fadamet", "strategies.fadam:FAdam", "clients.fadamet:FAdamETClient", "docs/algorithms/fadamet.md",
                  "LocalAdam + tracking y − y_i added after the Adam moments; Y^t ⊆ S^t refresh y_i", _TRACKING,
                  _ADAM, tunable=_ADAM_TUNED),
        Algorithm("fadamgt", "strategies.fadam:FAdam", "clients.fadamgt:FAdamGTClient", "docs/algorithms/fadamgt.md",
                  "LocalAdam + tracking y − y_i added to the gradient before the Adam moments", _TRACKING,
                  _ADAM, tunable=_ADAM_TUNED),
        Algorithm("fedlada", "strategies.fedlada:FedLADA", "clients.fedlada:FedLADAClient",
                  "docs/algorithms/fedlada.md",
                  "local Adam from the mean v̄, move α·Adam + (1 − α)·g_a (reconstructed from the paper)",
                  {"server_lr": "server-lr"}, {"alpha": "fedlada-alpha", **_ADAM}, tunable=_FEDLADA_TUNED),
        Algorithm("mimesvrg", "strategies.mimesvrg:MimeSVRG", "clients.mimesvrg:MimeSVRGClient",
                  "docs/algorithms/mimesvrg.md",
                  "two exchanges: full gradients → c, then steps g(x) − g(x^t) + c", {"server_lr": "server-lr"},
                  sum_scale=True, checks=(_MIME_SVRG,), tunable=_SGD),
        Algorithm("losac", "strategies.losac:LoSAC", "clients.losac:LoSACClient", "docs/algorithms/losac.md",
                  "per-block gradient table y_ij + global estimate ϕ: step G_j + ϕ/N − y_ij",
                  _LOSAC, sum_scale=True, tunable=_SGD),
        Algorithm("fedsaga", "strategies.fedavg:FedAvg", "clients.fedsaga:FedSagaClient", "docs/algorithms/fedsaga.md",
                  "LoSAC's loop with the local table only: step G_j − y_ij + mean_j y_ij",
                  {"server_lr": "server-lr"}, sum_scale=True, tunable=_SGD),
        Algorithm("losac-prox", "strategies.losac:LoSAC", "clients.losac_prox:LoSACProxClient",
                  "docs/algorithms/losac-prox.md",
                  "LoSAC + proximal step prox_ηΨ (ℓ1 or nuclear norm) after each move",
                  _LOSAC, sum_scale=True, tunable=_PROX_TUNED),
        Algorithm("scaffold-prox", "strategies.scaffold:Scaffold", "clients.scaffold_prox:ScaffoldProxClient",
                  "docs/algorithms/scaffold-prox.md", "SCAFFOLD + the same proximal step", {"server_lr": "server-lr"},
                  {"option": "scaffold-option"}, sum_scale=True, checks=(_SCAFFOLD_OPTION_1,),
                  tunable=_PROX_TUNED),
    )
)  # fmt: skip


def register(algorithm: Algorithm) -> Algorithm:
    """Add a plug-in algorithm to this process's registry (fedsuite.plugins); raises PluginError saying why not.
    Packages that want every process (the apps, simulation.*) to see it declare an entry point instead."""
    return ALGORITHMS.register(algorithm)


def _load(path: str):
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)


def _kwargs(cfg: Config, args: dict[str, str]) -> dict:
    return {arg: float_list(cfg[key]) if arg in _LIST_ARGS else cfg[key] for arg, key in args.items()}


def build_rule(cfg: Config, settings):
    """The algorithm's server rule (strategies/) with its hyper-parameters from `cfg`."""
    algo = ALGORITHMS[cfg["algorithm"]]
    return _load(algo.strategy)(settings, **_kwargs(cfg, algo.strategy_args))


def build_client(cfg: Config, node):
    algo = ALGORITHMS[cfg["algorithm"]]
    return _load(algo.client)(node, **_kwargs(cfg, algo.client_args))
