"""Sample-level DP (DP-SGD) inside the shared local loop (fedsuite/privacy/dp_sgd.py, docs/privacy-dp-sgd.md): with
no noise and a clip no record reaches it is the plain run, for several algorithms; per-record gradients are each
record's own and clipped to C_s; the noise has std σ_s·C_s/B and its own reproducible stream; each client's ε is
the run accountant's for the steps it took; settings the accountant cannot describe are refused in one line; with
dp-sgd off the loop never enters the private path."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

import fedsuite.privacy.dp_sgd as dp_sgd
from fedsuite import testing as kit
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.local.loop import UpdateRule
from fedsuite.models.networks import FlatModel, build_model, loss_function
from fedsuite.privacy.accountant import RunAccountant
from fedsuite.server.sampling import Sampler

dp_accounting = pytest.importorskip("dp_accounting")

PRIVATE = {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 1.0}
NO_NOISE_NO_CLIP = {"dp-sgd": True, "dp-sgd-noise": 0.0, "dp-sgd-clip": 1e6}  # no record's gradient comes near 1e6
# per-record gradients summed and divided by B differ from autograd's batch-mean gradient in float rounding only
ROUNDING = 1e-6


# ---- no noise and no clipping: the plain run ------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "fedspeed", "fedsam"])
def test_without_noise_and_clipping_dp_sgd_is_the_plain_run(algorithm):
    plain = kit.run_algorithm(algorithm, kit.PARTIAL)
    private = kit.run_algorithm(algorithm, {**kit.PARTIAL, **NO_NOISE_NO_CLIP})
    for a, b in zip(plain.rounds, private.rounds, strict=True):
        assert np.abs(a.x - b.x).max() <= ROUNDING, f"round {a.round}"


def test_without_noise_and_clipping_a_classifier_matches_the_plain_run_to_rounding():
    cfg = {**kit.PARTIAL, "dataset": "synthetic-logistic", "synthetic-dim": 12, "synthetic-samples": 30,
           "batch-size": 6}  # fmt: skip
    plain = kit.run_algorithm("fedavg", cfg)
    private = kit.run_algorithm("fedavg", {**cfg, **NO_NOISE_NO_CLIP})
    assert np.abs(plain.x - private.x).max() <= ROUNDING


def test_with_dp_sgd_off_the_loop_never_enters_the_private_path(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the private path ran with dp-sgd off")

    monkeypatch.setattr(dp_sgd, "per_record_gradients", refuse)
    monkeypatch.setattr(dp_sgd.DpSgd, "bind", refuse)
    run = kit.run_algorithm("fedsam", kit.PARTIAL)
    assert all("dp_sgd_epsilon" not in r.row and r.row["train_loss"] is not None for r in run.rounds)


def test_a_noisy_run_is_reproducible_only_when_seeded_and_sends_no_training_loss():
    """dp-noise-source='seeded': two runs are equal; the default secret noise differs between runs."""
    seeded = {**kit.PARTIAL, **PRIVATE, "dp-noise-source": "seeded"}
    a = kit.run_algorithm("fedavg", seeded)
    b = kit.run_algorithm("fedavg", seeded)
    plain = kit.run_algorithm("fedavg", kit.PARTIAL)
    assert np.array_equal(a.x, b.x) and not np.array_equal(a.x, plain.x)
    assert all(r.row["train_loss"] is None for r in a.rounds)  # the records' own losses carry no noise: not sent
    c = kit.run_algorithm("fedavg", {**kit.PARTIAL, **PRIVATE})
    d = kit.run_algorithm("fedavg", {**kit.PARTIAL, **PRIVATE})
    assert not np.array_equal(c.x, d.x) and not np.array_equal(c.x, a.x)


# ---- per-record gradients and clipping ------------------------------------------------------------------------
def _classifier(name: str, shape: tuple[int, ...], classes: int = 3) -> FlatModel:
    torch.manual_seed(0)
    return FlatModel(build_model(name, shape, classes, "classification"))


@pytest.mark.parametrize(("name", "shape"), [("logreg", (7,)), ("2nn", (6,)), ("cnn", (1, 8, 8))])
def test_per_record_gradients_are_each_records_own_gradient(name, shape):
    model, loss_fn = _classifier(name, shape), loss_function("classification")
    inputs, targets = torch.randn(5, *shape), torch.tensor([0, 1, 2, 1, 0])
    losses, grads = dp_sgd.per_record_gradients(model, loss_fn, inputs, targets)
    assert grads.shape == (5, model.dim)
    for i in range(5):
        loss = model.loss_and_grad(loss_fn, inputs[i : i + 1], targets[i : i + 1])
        assert torch.allclose(grads[i], model.grad, atol=1e-6) and torch.isclose(losses[i], loss, atol=1e-6)


def test_every_per_record_gradient_is_clipped_to_the_clip_norm():
    model, loss_fn = _classifier("2nn", (6,)), loss_function("classification")
    _, grads = dp_sgd.per_record_gradients(model, loss_fn, 10 * torch.randn(16, 6), torch.randint(0, 3, (16,)))
    norms = grads.norm(dim=1)
    clip = float(norms.median())
    clipped = dp_sgd.clip_records(grads.clone(), clip)
    assert bool((clipped.norm(dim=1) <= clip * (1 + 1e-6)).all())
    inside = norms <= clip
    assert inside.any() and torch.equal(clipped[inside], grads[inside])  # records inside the ball are untouched


def test_a_model_with_batch_norm_is_refused_in_one_line():
    cfg = resolve({**kit.PARTIAL, **PRIVATE})
    net = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    node = SimpleNamespace(cfg=cfg, model=FlatModel(net), data=list(range(12)), partition_id=0)
    with pytest.raises(ValueError, match=r"dp-sgd=true: .* BatchNorm1d .*GroupNorm") as err:
        dp_sgd.for_client(node, 1)
    assert "\n" not in str(err.value)


# ---- the noise --------------------------------------------------------------------------------------------------
def _private(noise: float, clip: float, batch: int, seed: int = 7, source: str = "seeded"):
    model = FlatModel(nn.Linear(2000, 1, bias=False))
    private = dp_sgd.DpSgd(noise, clip, batch, 100, 1e-5, Sampler(4, "fixed", 2), 0, 1, noise_source=source)
    oracle = private.bind(model, UpdateRule(), torch.Generator().manual_seed(seed))
    return model, private, oracle


def test_the_noise_on_a_zero_gradient_has_std_sigma_clip_over_batch():
    noise, clip, batch = 1.5, 2.0, 8
    model, private, oracle = _private(noise, clip, batch)
    inputs, targets = torch.zeros(batch, 2000), torch.zeros(batch)  # every record's gradient is 0
    draws = []
    for _ in range(20):
        private.new_step()
        oracle.loss_and_grad(loss_function("regression"), inputs, targets)
        draws.append(model.grad.clone())
    draws = torch.cat(draws)  # 40 000 draws: the sample std is within ~0.4 % of the true one (1 sd)
    expected = noise * clip / batch
    assert abs(float(draws.std()) / expected - 1) < 0.02
    assert abs(float(draws.mean())) < 4 * expected / math.sqrt(draws.numel())
    assert private.releases == [1] * 20


def test_the_seeded_noise_stream_is_a_function_of_the_rounds_generator_and_the_secure_one_is_not():
    def first_draw(seed, source="seeded"):
        model, private, oracle = _private(1.0, 1.0, 4, seed, source)
        private.new_step()
        oracle.loss_and_grad(loss_function("regression"), torch.zeros(4, 2000), torch.zeros(4))
        return model.grad.clone()

    assert torch.equal(first_draw(7), first_draw(7)) and not torch.equal(first_draw(7), first_draw(8))
    assert not torch.equal(first_draw(7, "secure"), first_draw(7, "secure"))


def test_draw_noise_gives_the_numbers_release_draws():
    """The stacked step draws each client's noise into its row of a buffer (fedsuite/batched/private.py): the same
    numbers, from the same stream, as one client's release."""
    _, first, _ = _private(1.0, 1.0, 4)
    _, second, _ = _private(1.0, 1.0, 4)
    rows = torch.empty(3, 2000)
    for _ in range(2):  # the stream advances alike
        second.draw_noise(rows[1])
        assert torch.equal(rows[1], torch.randn(2000, generator=first._noise_stream))


def test_a_round_whose_loop_took_no_private_gradient_releases_nothing():
    """An engine that trained the client without its oracle is caught before the uplink: its update has no noise."""
    stage = dp_sgd.SampleLevelStage()
    never_bound = dp_sgd.DpSgd(1.0, 1.0, 4, 100, 1e-5, Sampler(4, "fixed", 2), 3, 1)
    with pytest.raises(RuntimeError, match="client 3's local loop took no private gradient this round"):
        stage.before_release(SimpleNamespace(private=never_bound))
    _, bound, _ = _private(1.0, 1.0, 4)
    with pytest.raises(RuntimeError, match="took no private gradient"):
        stage.before_release(SimpleNamespace(private=bound))  # bound, but no step released anything
    _, trained, oracle = _private(1.0, 1.0, 4)
    trained.new_step()
    oracle.loss_and_grad(loss_function("regression"), torch.zeros(4, 2000), torch.zeros(4))
    stage.before_release(SimpleNamespace(private=trained))  # no target: nothing else to refuse


# ---- accounting -------------------------------------------------------------------------------------------------
def _expected_epsilons(cfg: dict, releases_per_step: int, n: int, batch: int) -> list[float]:
    """Per round: the largest ε over the round's cohort, each client's from the accountant over the steps of the
    rounds that drew it."""
    sampler = Sampler(cfg["num-clients"], "fixed", cfg["clients-per-round"], seed=0)
    drawn = {p: 0 for p in range(cfg["num-clients"])}
    out = []
    sigma = cfg["dp-sgd-noise"] / math.sqrt(releases_per_step)
    for r in range(1, cfg["num-server-rounds"] + 1):
        cohort = sampler.cohort(r)
        for p in cohort:
            drawn[p] += 1
        epsilons = [RunAccountant(1e-5, {(sigma, batch, n): drawn[p] * cfg["local-steps"]}).epsilon() for p in cohort]
        out.append(max(epsilons))
    return out


@pytest.mark.parametrize(("algorithm", "releases"), [("fedavg", 1), ("fedsam", 2)])
def test_each_rounds_epsilon_is_the_accountants_for_the_steps_its_clients_took(algorithm, releases):
    cfg = {**kit.PARTIAL, **PRIVATE, "dp-sgd-noise": 2.0}
    run = kit.run_algorithm(algorithm, cfg)
    got = [r.row["dp_sgd_epsilon"] for r in run.rounds]
    want = _expected_epsilons(cfg, releases, n=cfg["synthetic-samples"], batch=cfg["batch-size"])
    assert got == want and got == sorted(got) and 0 < got[0] < math.inf


def test_full_batch_dp_sgd_is_the_gaussian_mechanism_without_subsampling():
    cfg = {**kit.LSQ, **PRIVATE, "num-server-rounds": 3}  # batch-size=0: every step the whole local dataset
    run = kit.run_algorithm("fedavg", cfg)
    steps = 3 * cfg["local-steps"]
    n = cfg["synthetic-samples"]
    gaussian = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    gaussian.compose(dp_accounting.GaussianDpEvent(1.0 / 2), steps)  # sensitivity 2C under replace-one
    assert run.rounds[-1].row["dp_sgd_epsilon"] == RunAccountant(1e-5, {(1.0, n, n): steps}).epsilon()
    assert run.rounds[-1].row["dp_sgd_epsilon"] == pytest.approx(gaussian.get_epsilon(1e-5), rel=1e-9)


def test_two_gradients_of_one_batch_are_the_librarys_composed_event():
    """A SAM step releases two gradients of the same batch: one sampled event around two composed Gaussians."""
    private = dp_sgd.DpSgd(1.3, 1.0, 50, 1000, 1e-5, Sampler(4, "fixed", 2), 0, 1, releases=[2] * 10)
    library = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    twice = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.3 / 2), 2)
    library.compose(dp_accounting.SampledWithoutReplacementDpEvent(1000, 50, twice), 3 * 10)
    ledger = RunAccountant(1e-5, private.events(rounds=3))
    assert ledger.epsilon() == pytest.approx(library.get_epsilon(1e-5), rel=1e-9)


def test_participations_count_the_rounds_whose_cohort_drew_the_client():
    sampler = Sampler(6, "fixed", 2, seed=3)
    want = sum(4 in sampler.cohort(r) for r in range(1, 31))
    assert dp_sgd.participations(sampler, 4, 30) == want
    assert dp_sgd.participations(sampler, 4, 10) == sum(4 in sampler.cohort(r) for r in range(1, 11))


# ---- refusals ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"dp-sgd-noise": -0.5}, "dp-sgd-noise=-0.5: must be >= 0"),
        ({"dp-sgd-clip": 0.0}, "dp-sgd-clip=0.0: must be > 0"),
        ({"dp-delta": 1.0}, "dp-delta=1.0: must be in (0, 1)"),
        ({"local-steps": 0}, "set local-steps > 0"),
        ({"local-batches": "blocks"}, "local-batches='blocks'"),
        ({"algorithm": "mimesvrg"}, "algorithm='mimesvrg' is refused"),
        ({"algorithm": "losac"}, "algorithm='losac' is refused"),
        ({"algorithm": "fedsaga"}, "algorithm='fedsaga' is refused"),
        ({"algorithm": "scaffold", "scaffold-option": 1}, "scaffold-option=1 uploads a full local gradient"),
    ],
)
def test_settings_the_accountant_cannot_describe_are_refused_before_training(keys, named):
    with pytest.raises(ConfigError) as err:
        resolve({**kit.PARTIAL, **PRIVATE, **keys})
    lines = [line for line in str(err.value).splitlines() if named in line]
    assert len(lines) == 1, str(err.value)


def test_dp_sgd_off_refuses_nothing_it_would_refuse():
    resolve({**kit.PARTIAL, "algorithm": "mimesvrg", "local-steps": 0})
