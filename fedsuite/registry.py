"""Algorithm name → (server half, client half, which run-config keys feed which constructor argument).

Strategy and client classes are imported only when an algorithm is built, so config validation stays
light. README's algorithm table is generated from this table (`python -m simulation.algorithms`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from fedsuite.config import Config, float_list


def _stateless(cfg: Config) -> int:
    return 0


@dataclass(frozen=True)
class Algorithm:
    name: str
    strategy: str  # "module:Class"
    client: str
    section: str  # ALGORITHMS.md section
    summary: str
    strategy_args: dict[str, str] = field(default_factory=dict)  # constructor kwarg -> run-config key
    client_args: dict[str, str] = field(default_factory=dict)
    client_state_vectors: Callable[[Config], int] = _stateless  # persistent d-vectors per client
    vectors: tuple[int, int] = (1, 1)  # d-vectors down / up per participating client per round, defaults (§1)
    tracking_up: int = 0  # extra d-vectors up from clients in the tracking subset Y^t only (FAdamET/GT, §3.5)


def _duals_on_clients(cfg: Config) -> int:
    return 1 if cfg["dual-storage"] == "client" else 0


def _fedadmm_state(cfg: Config) -> int:
    return 2 if cfg["fedadmm-variant"] == "wang" else 1  # λ_i and x̂_i, or λ_i


_FEDOPT_ARGS = {"server_lr": "fedopt-lr", "beta1": "fedopt-beta1", "beta2": "fedopt-beta2", "tau": "fedopt-tau"}

_ADAM = {"beta1": "adam-beta1", "beta2": "adam-beta2", "eps": "adam-eps"}
_TRACKING = {"server_lr": "server-lr", "tracking_clients": "tracking-clients"}

_LOSAC = {"server_lr": "server-lr", "phi_scale": "losac-phi-scale"}


def _blocks(cfg: Config) -> int:
    return int(cfg["losac-blocks"])  # the table y_{i,1..M}


_SPEED_CLIENT = {"mu": "fedspeed-mu", "rho": "fedspeed-rho", "mix": "fedspeed-alpha"}
_MIM = {"alphas": "fedmim-alphas", "betas": "fedmim-betas"}
_LIST_ARGS = {"alphas", "betas"}  # comma-separated run-config strings → tuples of floats

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("fedavg", "strategies.fedavg:FedAvg", "clients.fedavg:FedAvgClient", "§4.1",
                  "local SGD, server averages displacements", {"server_lr": "server-lr"}),
        Algorithm("fedprox", "strategies.fedavg:FedAvg", "clients.fedprox:FedProxClient", "§4.2",
                  "FedAvg + client prox term μ(x − x^t)", {"server_lr": "server-lr"}, {"mu": "prox-mu"}),
        Algorithm("fedadam", "strategies.fedopt:FedAdam", "clients.fedavg:FedAvgClient", "§4.3",
                  "server Adam on mean displacement, no bias correction", _FEDOPT_ARGS),
        Algorithm("fedyogi", "strategies.fedopt:FedYogi", "clients.fedavg:FedAvgClient", "§4.3",
                  "server Yogi on mean displacement", _FEDOPT_ARGS),
        Algorithm("fedadagrad", "strategies.fedopt:FedAdagrad", "clients.fedavg:FedAvgClient", "§4.3",
                  "server Adagrad on mean displacement", _FEDOPT_ARGS),
        Algorithm("scaffold", "strategies.scaffold:Scaffold", "clients.scaffold:ScaffoldClient", "§4.4",
                  "control variates: step g − c_i + c; client keeps c_i", {"server_lr": "server-lr"},
                  {"option": "scaffold-option"}, lambda cfg: 1, vectors=(2, 2)),
        Algorithm("feddyn", "strategies.feddyn:FedDyn", "clients.feddyn:FedDynClient", "§4.5",
                  "dynamic regulariser: step g − ∇L_i + α(x − x^t)", {"dual_storage": "dual-storage"},
                  {"alpha": "feddyn-alpha", "dual_storage": "dual-storage"}, _duals_on_clients),
        Algorithm("fedadmm", "strategies.fedadmm:FedADMM", "clients.fedadmm:FedADMMClient", "§4.6",
                  "primal-dual: step g + λ_i + ρ(x − x^t); consensus (wang) or gong",
                  {"variant": "fedadmm-variant", "server_lr": "server-lr"},
                  {"rho": "fedadmm-rho", "variant": "fedadmm-variant"}, _fedadmm_state),
        Algorithm("fedcm", "strategies.fedcm:FedCM", "clients.fedcm:FedCMClient", "§3.3",
                  "client-level momentum: step α g + (1 − α) D", {"server_lr": "server-lr"}, {"alpha": "fedcm-alpha"},
                  vectors=(2, 1)),
        Algorithm("fedsam", "strategies.fedavg:FedAvg", "clients.fedsam:FedSAMClient", "§4.7",
                  "FedAvg with the gradient at the SAM point", {"server_lr": "server-lr"}, {"rho": "sam-rho"}),
        Algorithm("mofedsam", "strategies.fedcm:FedCM", "clients.fedsam:MoFedSAMClient", "§4.7",
                  "FedCM with the gradient at the SAM point", {"server_lr": "server-lr"},
                  {"alpha": "fedcm-alpha", "rho": "sam-rho"}, vectors=(2, 1)),
        Algorithm("fedspeed", "strategies.fedspeed:FedSpeed", "clients.fedspeed:FedSpeedClient", "§3.1",
                  "FedDyn's correction + prox with a normalised SAM gradient",
                  {"dual_storage": "dual-storage", "dual_agg": "fedspeed-dual-agg"},
                  {**_SPEED_CLIENT, "dual_storage": "dual-storage", "dual_agg": "fedspeed-dual-agg"},
                  _duals_on_clients),
        Algorithm("fedspeed-ing", "strategies.fedspeed:FedSpeedIng", "clients.fedspeed_ing:FedSpeedIngClient",
                  "§3.2", "FedSpeed + inertial prox centre x̃ and extrapolated correction (our reading)",
                  {"zeta": "fedspeed-ing-zeta", "dual_agg": "fedspeed-ing-dual-agg"},
                  {**_SPEED_CLIENT, "zeta": "fedspeed-ing-zeta", "dual_agg": "fedspeed-ing-dual-agg"}, lambda cfg: 2,
                  vectors=(2, 1)),
        Algorithm("fedmim", "strategies.fedmim:FedMIM", "clients.fedmim:FedMIMClient", "§3.4",
                  "multi-step inertial momentum: look-ahead gradient, move along a_t",
                  {**_MIM, "server_lr": "server-lr"}, _MIM, vectors=(3, 1)),
        Algorithm("localadam", "strategies.fedavg:FedAvg", "clients.localadam:LocalAdamClient", "§3.6",
                  "local AMSGrad (m reset per round, no bias correction), client keeps v_i", {"server_lr": "server-lr"},
                  _ADAM, lambda cfg: 1),
        Algorithm("fadamet", "strategies.fadam:FAdam", "clients.fadamet:FAdamETClient", "§3.5",
                  "LocalAdam + tracking y − y_i added after the Adam moments; Y^t ⊆ S^t refresh y_i", _TRACKING,
                  _ADAM, lambda cfg: 2, vectors=(2, 1), tracking_up=1),
        Algorithm("fadamgt", "strategies.fadam:FAdam", "clients.fadamgt:FAdamGTClient", "§3.5",
                  "LocalAdam + tracking y − y_i added to the gradient before the Adam moments", _TRACKING,
                  _ADAM, lambda cfg: 2, vectors=(2, 1), tracking_up=1),
        Algorithm("fedlada", "strategies.fedlada:FedLADA", "clients.fedlada:FedLADAClient", "§3.6",
                  "local Adam from the mean v̄, move α·Adam + (1 − α)·g_a (reconstructed, [verify])",
                  {"server_lr": "server-lr"}, {"alpha": "fedlada-alpha", **_ADAM}, vectors=(3, 2)),
        Algorithm("mimesvrg", "strategies.mimesvrg:MimeSVRG", "clients.mimesvrg:MimeSVRGClient", "§4.8",
                  "two exchanges: full gradients → c, then steps g(x) − g(x^t) + c", {"server_lr": "server-lr"},
                  vectors=(3, 2)),
        Algorithm("losac", "strategies.losac:LoSAC", "clients.losac:LoSACClient", "§3.7",
                  "per-block gradient table y_ij + global estimate ϕ: step G_j + ϕ/N − y_ij",
                  _LOSAC, client_state_vectors=_blocks, vectors=(2, 2)),
        Algorithm("fedsaga", "strategies.fedavg:FedAvg", "clients.fedsaga:FedSagaClient", "§3.7",
                  "LoSAC's loop with the local table only: step G_j − y_ij + mean_j y_ij",
                  {"server_lr": "server-lr"}, client_state_vectors=_blocks),
        Algorithm("losac-prox", "strategies.losac:LoSAC", "clients.losac_prox:LoSACProxClient", "§3.7",
                  "LoSAC + proximal step prox_ηΨ (ℓ1 or nuclear norm) after each move",
                  _LOSAC, client_state_vectors=_blocks, vectors=(2, 2)),
        Algorithm("scaffold-prox", "strategies.scaffold:Scaffold", "clients.scaffold_prox:ScaffoldProxClient",
                  "§3.7", "SCAFFOLD + the same proximal step", {"server_lr": "server-lr"},
                  {"option": "scaffold-option"}, lambda cfg: 1, vectors=(2, 2)),
    )
}  # fmt: skip


def _load(path: str):
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)


def _kwargs(cfg: Config, args: dict[str, str]) -> dict:
    return {arg: float_list(str(cfg[key])) if arg in _LIST_ARGS else cfg[key] for arg, key in args.items()}


def build_strategy(cfg: Config, plan):
    algo = ALGORITHMS[str(cfg["algorithm"])]
    return _load(algo.strategy)(plan, **_kwargs(cfg, algo.strategy_args))


def build_client(cfg: Config, node):
    algo = ALGORITHMS[str(cfg["algorithm"])]
    return _load(algo.client)(node, **_kwargs(cfg, algo.client_args))
