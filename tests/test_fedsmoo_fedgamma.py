"""FedSMOO and FedGAMMA (docs/algorithms/fedsmoo.md, docs/algorithms/fedgamma.md).

- The DRegSAM point with ν_i = s = 0 is SAM's point, and its ν_i update is the hand computation.
- One client round of each, under clip-scope='reference', equals the same round written independently in plain
  torch in the form of the authors' simulator (FL-Simulator client/fedsmoo.py + optimizer/DRegSAM.py,
  client/fedgamma.py + optimizer/ESAM.py): torch.optim.SGD with weight decay, the ascent steps on the parameter
  list, the correction as a linear loss term, clip_grad_norm_ over all parameters; with and without clipping.
  FedSMOO's ν_i and FedGAMMA's c_i after the round agree too; the server's s is one numpy line.
- Reductions: ρ = 0 is SCAFFOLD (FedGAMMA) and FedDyn with α_d = μ (FedSMOO), bit for bit; ρ > 0 differs.
- Least squares: the ρ = 0 forms reach x*; with ρ > 0 they stay O(ρ) away, the distance shrinking with ρ.
- Bad input: one line naming the key.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest
import torch
from torch import nn

from fedsuite import testing as kit
from fedsuite.clients.fedgamma import FedGammaClient
from fedsuite.clients.fedsmoo import FedSMOOClient
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.local.loop import DualRegularisedSharpness, SharpnessAware, minibatches, train_local
from fedsuite.models.networks import FlatModel, build_model, loss_function
from fedsuite.rules.client_rule import RoundContext
from fedsuite.rules.rounds import Reply
from fedsuite.rules.server_rule import RuleSettings
from fedsuite.server.sampling import Sampler
from fedsuite.state.store import ClientState
from fedsuite.strategies.fedsmoo import FedSMOO
from tests import reference as ref
from tests.helpers import one_client_of_a_2nn

MU, RHO, LR, WD, EPOCHS, BATCH = 0.1, 0.1, 0.05, 1e-3, 2, 8  # 40 samples / B = 8: K = 10, FedGamma's nominal K


@pytest.fixture(scope="module")
def setting():
    net, data, x0 = one_client_of_a_2nn()
    d = x0.numel()
    vectors = {
        "h_i": torch.randn(d) * 0.5,  # FedSMOO: the server's sum of this client's displacements, ĝ_i = −μ·h_i
        "nu_i": torch.randn(d) * 0.01,  # FedSMOO: the client's dynamic dual from its last round
        "c_i": torch.randn(d) * 0.05,  # FedGAMMA: the client's control variate
        "c": torch.randn(d) * 0.05,  # FedGAMMA: the server's control variate
    }
    direction = torch.randn(d)
    vectors["s"] = RHO * direction / direction.norm()  # FedSMOO: the server's global perturbation, norm ρ
    return net, data, x0, vectors


def _client(cls, algorithm: str, dim: int, scope: str, *args):
    cfg = resolve({"algorithm": algorithm, "clip-scope": scope})
    node = types.SimpleNamespace(cfg=cfg, state_of=lambda client: ClientState({}, dim))  # a node's interface
    return cls(node, *args)


def _train(setting, client, down: dict, clip: float):
    net, data, x0, _ = setting
    model = FlatModel(copy.deepcopy(net))
    ctx = RoundContext(round=1, lr=LR, down={"model": x0, **down})
    rule = client.rule(ctx)
    result = train_local(model, x0, data, loss_function("classification"), rule, lr=LR, weight_decay=WD,
                         clip_norm=clip, epochs=EPOCHS, steps=0, batch_size=BATCH,
                         generator=torch.Generator().manual_seed(3))  # fmt: skip
    up = client.uplink(result, rule, ctx)
    return result.x.detach().clone(), {k: v.detach().clone() for k, v in up.items()}


def fedsmoo_round(setting, clip: float, scope: str = "reference"):
    x0, v = setting[2], setting[3]
    client = _client(FedSMOOClient, "fedsmoo", x0.numel(), scope, MU, RHO)
    client.state.set("dual", -MU * v["h_i"])
    client.state.set("nu_i", v["nu_i"])
    return _train(setting, client, {"s": v["s"]}, clip)


def fedgamma_round(setting, clip: float):
    x0, v = setting[2], setting[3]
    client = _client(FedGammaClient, "fedgamma", x0.numel(), "reference", RHO)
    client.state.set("c_i", v["c_i"])
    x, up = _train(setting, client, {"c": v["c"]}, clip)
    return x, v["c_i"] + up["delta_c"]


# ---- the simulator's form, written here in plain torch ---------------------------------------------------------
def _as_params(vector: torch.Tensor, params) -> list[torch.Tensor]:
    out, start = [], 0
    for p in params:
        out.append(vector[start : start + p.numel()].reshape(p.shape).clone())
        start += p.numel()
    return out


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def simulator_round(setting, clip: float, algorithm: str):
    """One client round as FL-Simulator's fedsmoo / fedgamma client runs it (module docstring)."""
    net, data, x0, v = setting
    model = copy.deepcopy(net)
    torch.nn.utils.vector_to_parameters(x0.clone(), model.parameters())
    params = list(model.parameters())
    smoo = algorithm == "fedsmoo"
    optimiser = torch.optim.SGD(params, lr=LR, weight_decay=WD + MU if smoo else WD)
    loss_fn = nn.CrossEntropyLoss()
    dyn_dual, global_dual = _as_params(v["nu_i"], params), _as_params(v["s"], params)
    linear = MU * (v["h_i"] - x0) if smoo else v["c"] - v["c_i"]  # the loss term ⟨x, linear⟩
    for inputs, targets in minibatches(data, EPOCHS, 0, BATCH, torch.Generator().manual_seed(3)):
        optimiser.zero_grad()
        loss_fn(model(inputs), targets).backward()
        with torch.no_grad():
            if smoo:  # DRegSAM's first step: the ascent direction is g − (μ_i + s)
                for p, m, s in zip(params, dyn_dual, global_dual, strict=True):
                    p.grad.sub_(m + s)
            norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
            ascent = [p.grad * (RHO / (norm + 1e-7)) for p in params]
            for p, e in zip(params, ascent, strict=True):
                p.add_(e)
            if smoo:  # μ_i += e − s
                for m, e, s in zip(dyn_dual, ascent, global_dual, strict=True):
                    m += e - s
        optimiser.zero_grad()
        loss_fn(model(inputs), targets).backward()  # the gradient at the ascent point
        with torch.no_grad():
            for p, e in zip(params, ascent, strict=True):
                p.sub_(e)
        (torch.sum(torch.cat([p.reshape(-1) for p in params]) * linear)).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        optimiser.step()
    x = _flat(params)
    if smoo:
        return x, _flat(dyn_dual)
    steps = EPOCHS * len(data) / BATCH  # the simulator's nominal K (server/FedGamma.py)
    return x, v["c_i"] - v["c"] - (x - x0) / steps / LR


def _relative(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    return float((a - b).norm() / scale.norm())


@pytest.mark.parametrize("clip", [0.0, 10.0, 1.0])
def test_fedsmoo_reference_scope_is_the_simulators_round(setting, clip):
    x0 = setting[2]
    ours, up = fedsmoo_round(setting, clip)
    theirs, nu = simulator_round(setting, clip, "fedsmoo")
    assert (theirs - x0).norm() > 1e-2  # the round moved the model
    assert _relative(ours, theirs, theirs - x0) < 1e-5
    assert _relative(up["nu"], nu, nu - setting[3]["nu_i"]) < 1e-5  # the dynamic dual the round leaves
    assert (nu - setting[3]["nu_i"]).norm() > 1e-3


def test_fedsmoo_clean_scope_differs_once_clipping_bites(setting):
    x0 = setting[2]
    theirs, _ = simulator_round(setting, 1.0, "fedsmoo")
    assert _relative(fedsmoo_round(setting, 1.0, "clean")[0], theirs, theirs - x0) > 1e-2


@pytest.mark.parametrize("clip", [0.0, 10.0, 1.0])
def test_fedgamma_round_is_the_simulators_round(setting, clip):
    x0, c_i = setting[2], setting[3]["c_i"]
    ours, c_ours = fedgamma_round(setting, clip)
    theirs, c_theirs = simulator_round(setting, clip, "fedgamma")
    assert (theirs - x0).norm() > 1e-2
    assert _relative(ours, theirs, theirs - x0) < 1e-5
    assert _relative(c_ours, c_theirs, c_theirs - c_i) < 1e-5


def test_fedsmoo_server_perturbation_is_the_normalised_cohort_mean_of_the_duals():
    rng = np.random.default_rng(0)
    d, rho = 7, 0.05
    x0 = rng.normal(size=d).astype(np.float32)
    rule = FedSMOO(RuleSettings(initial_x=x0, sampler=Sampler(5, "fixed", 3), lr=0.1), rho=rho)
    assert not rule.s.any()  # zeros before the first round
    replies = [Reply(i, 10, 4, 0.1, {"delta": rng.normal(size=d), "nu": rng.normal(size=d)}) for i in (0, 2, 3)]
    new_x = rule.aggregate(1, replies)
    m = np.mean([r.arrays["nu"] for r in replies], axis=0)
    np.testing.assert_allclose(rule.s, rho * m / (np.linalg.norm(m) + 1e-7), rtol=1e-12)
    h_mean = sum(r.arrays["delta"] for r in replies) / 5
    expected = x0 + np.mean([r.arrays["delta"] for r in replies], axis=0) + h_mean
    np.testing.assert_allclose(new_x, expected, rtol=1e-6)


# ---- the point itself ------------------------------------------------------------------------------------------
def _point_gradient(point, seed: int = 1):
    torch.manual_seed(seed)
    net = build_model("2nn", (1, 28, 28), 10, "classification")
    model = FlatModel(net)
    x = model.x.detach().clone()
    inputs, targets = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    point(model, loss_function("classification"), inputs, targets)
    assert torch.equal(model.x, x)  # restored bit for bit
    return model.grad.detach().clone(), model, inputs, targets, x


def test_dregsam_point_with_zero_duals_is_the_sam_point():
    sam, model, *_ = _point_gradient(SharpnessAware(RHO, eps=1e-7))
    dim = model.x.numel()
    point = DualRegularisedSharpness(RHO, torch.zeros(dim), torch.zeros(dim), eps=1e-7)
    dreg, *_ = _point_gradient(point)
    assert torch.equal(dreg, sam)


def test_dregsam_point_moves_the_dual_by_the_ascent_minus_s():
    torch.manual_seed(5)
    dim = FlatModel(build_model("2nn", (1, 28, 28), 10, "classification")).x.numel()
    nu, s = torch.randn(dim) * 0.01, torch.randn(dim) * 0.01
    point = DualRegularisedSharpness(RHO, nu.clone(), s, eps=1e-7)
    _, model, inputs, targets, x = _point_gradient(point)
    model.x.copy_(x)
    model.loss_and_grad(loss_function("classification"), inputs, targets)
    a = model.grad.detach() - nu - s
    e = RHO * a / (a.norm() + 1e-7)
    torch.testing.assert_close(point.dual, nu + e - s, rtol=1e-5, atol=1e-8)
    model.x.copy_(x + e)
    model.loss_and_grad(loss_function("classification"), inputs, targets)
    expected = model.grad.detach().clone()
    model.x.copy_(x)
    point2 = DualRegularisedSharpness(RHO, nu.clone(), s, eps=1e-7)
    point2(model, loss_function("classification"), inputs, targets)
    torch.testing.assert_close(model.grad, expected, rtol=1e-5, atol=1e-7)


# ---- reductions ------------------------------------------------------------------------------------------------
def test_fedgamma_with_rho_zero_is_scaffold():
    kit.check_reduction("fedgamma", "scaffold", a_keys={"fedgamma-rho": 0.0}, knob={"fedgamma-rho": 0.1})


def test_fedsmoo_with_rho_zero_is_feddyn():
    kit.check_reduction("fedsmoo", "feddyn", a_keys={"fedsmoo-rho": 0.0, "fedsmoo-mu": 0.2},
                        b_keys={"feddyn-alpha": 0.2}, knob={"fedsmoo-rho": 0.1})  # fmt: skip


def test_fedsmoo_with_rho_zero_is_fedspeed_with_rho_zero():
    kit.check_reduction("fedsmoo", "fedspeed", a_keys={"fedsmoo-rho": 0.0, "fedsmoo-mu": 0.2},
                        b_keys={"fedspeed-rho": 0.0, "fedspeed-mu": 0.2})  # fmt: skip


# ---- least squares: where each ends ----------------------------------------------------------------------------
FED = {**kit.LSQ, "eval-every": 100000}
SETTINGS = {
    "fedgamma": lambda rho: {"fedgamma-rho": rho},
    "fedsmoo": lambda rho: {"fedsmoo-rho": rho, "fedsmoo-mu": 0.3},
}


# slow: the main suite has ρ = 0 as SCAFFOLD / FedDyn bit for bit (above), which reach x* (tests/test_drift_family.py)
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(SETTINGS))
def test_rho_zero_reaches_the_optimum(algorithm):
    lsq = kit.least_squares(FED)
    run = kit.run_algorithm(algorithm, {**FED, "num-server-rounds": 250, **SETTINGS[algorithm](0.0)})
    assert lsq.relative_error(run.x) < 1e-6


def _last_errors(algorithm: str, rho: float, rounds: int = 120, last: int = 30) -> list[float]:
    lsq = kit.least_squares(FED)
    run = kit.run_algorithm(algorithm, {**FED, "num-server-rounds": rounds, **SETTINGS[algorithm](rho)})
    return [lsq.relative_error(r.x) for r in run.rounds[-last:]]


def test_fedgamma_with_rho_settles_at_a_point_order_rho_away():
    """SAM's gradient of a quadratic at x + ρu is ∇F_i(x) + ρH_i u: the fixed point moves by O(ρ)."""
    for rho in (0.1, 0.01):
        errors = _last_errors("fedgamma", rho)
        assert max(errors) - min(errors) < 1e-6 * rho  # settled
        assert 0.1 * rho < errors[-1] < 0.5 * rho  # near x*, and measurably not at it


def test_fedsmoo_with_rho_circles_in_a_band_order_rho_wide():
    """‖s‖ = ρ whenever the duals are not zero, so the perturbation never vanishes and ν_i keeps moving: the model
    stays in a band O(ρ) around x* without settling."""
    for rho in (0.1, 0.01):
        errors = _last_errors("fedsmoo", rho)
        assert 0.1 * rho < min(errors) and max(errors) < 0.5 * rho
        assert max(errors) - min(errors) > 0.01 * rho  # it keeps moving


# ---- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "values,key",
    [
        ({"algorithm": "fedsmoo", "fedsmoo-rho": -0.1}, "fedsmoo-rho"),
        ({"algorithm": "fedsmoo", "fedsmoo-mu": 0.0}, "fedsmoo-mu"),
        ({"algorithm": "fedsmoo", "fedsmoo-mu": -1.0}, "fedsmoo-mu"),
        ({"algorithm": "fedsmoo", "dual-storage": "server"}, "dual-storage"),
        ({"algorithm": "fedgamma", "fedgamma-rho": -0.1}, "fedgamma-rho"),
    ],
)
def test_bad_input_is_refused_in_one_line_naming_the_key(values, key):
    with pytest.raises(ConfigError) as error:
        resolve(values)
    lines = [line for line in str(error.value).splitlines() if line.strip() and "invalid run config" not in line]
    assert len(lines) == 1 and key in lines[0], str(error.value)


def test_flsim_preset_sets_the_readme_values_of_fedgamma_and_fedsmoo():
    cfg = resolve({"preset": "flsim-cifar10-100x10"})
    assert (cfg["fedgamma-rho"], cfg["fedsmoo-mu"], cfg["fedsmoo-rho"]) == (0.01, 0.1, 0.1)
    for algorithm in ("fedgamma", "fedsmoo"):
        assert resolve({"preset": "flsim-cifar10-100x10", "algorithm": algorithm})["algorithm"] == algorithm


# ---- whole runs against independent numpy references (tests/reference.py) ---------------------------------------
TRAJECTORY = {**FED, "num-clients": 6, "clients-per-round": 3, "local-steps": 4, "num-server-rounds": 8,
              "lr-decay": 0.97, "weight-decay": 0.01, "lr": 0.03}  # fmt: skip


@pytest.mark.parametrize(
    "algorithm,keys,reference",
    [
        ("fedgamma", {"fedgamma-rho": 0.05}, lambda f: ref.fedgamma(f, 0.05)),
        ("fedsmoo", {"fedsmoo-mu": 0.2, "fedsmoo-rho": 0.05}, lambda f: ref.fedsmoo(f, 0.2, 0.05)),
    ],
    ids=["fedgamma", "fedsmoo"],
)
def test_partial_participation_trajectory_matches_numpy_reference(algorithm, keys, reference):
    ref.check_trajectory({**TRAJECTORY, "algorithm": algorithm, **keys}, reference)
