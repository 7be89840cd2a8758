"""dp-sgd-per-record: DP-SGD's clipped sum of a batch's per-record gradients by torch.func's vmap of every record's
gradient (the default) or by ghost clipping (fedsuite/privacy/per_record.py, one client; fedsuite/batched/ghost.py,
a stacked group). Ghost clipping gives vmap's clipped sums to float rounding for the layers it knows; a model or loss
it does not know is refused in one line naming the key."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedsuite.batched.ghost import StackedGhost
from fedsuite.batched.model import StackedModel
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.models.networks import FlatModel, build_model, loss_function
from fedsuite.privacy import dp_sgd
from fedsuite.privacy.per_record import ghost_clipped_sum, ghost_refusal
from fedsuite.run.inprocess import run_inprocess
from fedsuite.testing.kit import PARTIAL

pytest.importorskip("dp_accounting")


def _records(shape, task, records=6, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    inputs = (2 * torch.randn(records, *shape, generator=generator)).to(dtype)
    if task == "classification":
        return inputs, torch.randint(0, 3, (records,), generator=generator)
    if task == "binary":
        return inputs, torch.randint(0, 2, (records,), generator=generator).to(dtype)
    return inputs, torch.randn(records, generator=generator).to(dtype)


def _vmap_clipped_sum(model: FlatModel, loss_fn, inputs, targets) -> tuple[torch.Tensor, float]:
    """vmap's clipped sum with the clip at the records' median gradient norm (some records clipped, some not)."""
    _, grads = dp_sgd.per_record_gradients(model, loss_fn, inputs, targets)
    clip = float(grads.norm(dim=1).median())
    return dp_sgd.clip_records(grads, clip).sum(dim=0), clip


class _Sequence(nn.Module):
    """A 1-D convolution, a layer norm and linear layers over a sequence (B, 3, 10) → (B, 1), in float64."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding="same")
        self.norm = nn.LayerNorm(4)
        self.mix = nn.Linear(4, 4)
        self.head = nn.Linear(40, 1)

    def forward(self, inputs):
        h = torch.relu(self.conv(inputs)).transpose(1, 2)  # (B, 10, 4)
        h = torch.relu_(self.mix(self.norm(h)))  # an in-place operation after a layer: its output gradient holds
        return self.head(h.flatten(1))


@pytest.mark.parametrize(("name", "shape", "task", "tolerance"), [
    ("cnn", (3, 16, 16), "classification", 1e-5),
    ("2nn", (20,), "binary", 1e-5),
    ("linear", (7,), "regression", 1e-5),
])  # fmt: skip
def test_ghost_clipping_gives_vmaps_clipped_sum(name, shape, task, tolerance):
    """Convolutions and linear layers; cross-entropy, logistic and half squared losses (float32; ResNet-18-GN's group
    norms in float64 below)."""
    torch.manual_seed(0)
    model = FlatModel(build_model(name, shape, 3 if task == "classification" else 1, task))
    loss_fn = loss_function(task)
    inputs, targets = _records(shape, task)
    want, clip = _vmap_clipped_sum(model, loss_fn, inputs, targets)
    loss, got = dp_sgd.ghost_sum(model, loss_fn, inputs, targets, clip)
    assert got.shape == want.shape == (model.dim,)
    assert torch.allclose(got, want, rtol=0, atol=tolerance * float(want.abs().max()))
    losses, _ = dp_sgd.per_record_gradients(model, loss_fn, inputs, targets)
    assert float(loss) == pytest.approx(float(losses.mean()), rel=1e-6) and ghost_refusal(model.module) is None


@pytest.mark.parametrize("name", ["resnet18-gn", "sequence"])
def test_in_float64_ghost_clipping_is_vmaps_to_float64_rounding_and_reads_the_model_only(name):
    torch.manual_seed(1)
    if name == "sequence":
        module, shape, task = _Sequence().double(), (3, 10), "regression"
    else:
        shape, task = (3, 8, 8), "classification"
        module = build_model(name, shape, 3, task).double()
    model = FlatModel(module)
    inputs, targets = _records(shape, task, dtype=torch.float64)
    x, grad = model.x.clone(), model.grad.clone()
    want, clip = _vmap_clipped_sum(model, loss_function(task), inputs, targets)
    _, got = dp_sgd.ghost_sum(model, loss_function(task), inputs, targets, clip)
    assert got.dtype == torch.float64
    assert torch.allclose(got, want, rtol=0, atol=1e-12 * float(want.abs().max()))
    assert torch.equal(model.x, x) and torch.equal(model.grad, grad)  # read, never written


def test_the_stacked_ghost_gives_each_clients_own_clipped_sum_in_float64():
    """Three clients at their own rows, one stacked ghost pass: row c is client c's clipped sum by vmap."""
    torch.manual_seed(2)
    flat = FlatModel(_Sequence().double())
    clients, batch = 3, 5
    stacked = StackedModel(flat, clients)
    stacked.x.copy_(flat.x + 0.1 * torch.randn(clients, flat.dim, dtype=torch.float64))
    inputs = torch.randn(clients, batch, 3, 10, dtype=torch.float64)
    targets = torch.randn(clients, batch, dtype=torch.float64)
    loss_fn, clip = loss_function("regression"), 2.5
    want = []
    for c in range(clients):
        flat.x.copy_(stacked.x[c])
        _, grads = dp_sgd.per_record_gradients(flat, loss_fn, inputs[c], targets[c])
        assert (grads.norm(dim=1) > clip).any() and (grads.norm(dim=1) < clip).any()
        want.append(dp_sgd.clip_records(grads, clip).sum(dim=0))
    losses = StackedGhost(stacked, loss_fn).clipped_sums(inputs, targets, clip)
    want = torch.stack(want)
    assert torch.allclose(stacked.grad, want, rtol=0, atol=1e-12 * float(want.abs().max()))
    assert losses.shape == (clients,)


class _OwnParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.head = nn.Linear(4, 1)

    def forward(self, inputs):
        return self.head(inputs * self.scale)


def test_a_model_or_loss_ghost_clipping_does_not_know_is_refused_in_one_line_naming_the_key():
    refused = ghost_refusal(_OwnParameter())
    assert refused.startswith("dp-sgd-per-record='ghost': layer (the model itself) (_OwnParameter) has parameters")
    assert refused.endswith("use dp-sgd-per-record='vmap'") and "\n" not in refused
    assert "layer 0 (LSTM)" in ghost_refusal(nn.Sequential(nn.LSTM(3, 3)))
    assert "groups=2" in ghost_refusal(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2)))
    reflecting = nn.Conv2d(1, 1, 3, padding=1, padding_mode="reflect")
    assert "padding_mode='reflect'" in ghost_refusal(nn.Sequential(reflecting))
    assert "padding='same'" in ghost_refusal(nn.Sequential(nn.Conv1d(1, 1, 2, padding="same")))  # uneven padding
    assert ghost_refusal(nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Conv2d(1, 1, 3), nn.GroupNorm(1, 1))) is None
    frozen = _OwnParameter()
    frozen.scale.requires_grad_(False)
    assert ghost_refusal(frozen) is None  # only trainable parameters need per-record norms

    class Scaled(nn.Linear):  # a subclass may compute something else with the same parameters
        def forward(self, inputs):
            return 2 * super().forward(inputs)

    assert "layer 0 (Scaled) has parameters ghost clipping does not know" in ghost_refusal(nn.Sequential(Scaled(3, 1)))
    normed = nn.utils.weight_norm(nn.Linear(3, 1)) if hasattr(nn.utils, "weight_norm") else None
    if normed is not None and "weight_g" in dict(normed.named_parameters()):
        assert "has parameters weight_g, weight_v" in ghost_refusal(nn.Sequential(normed))
    hooked = nn.Linear(3, 1)
    hooked.register_forward_hook(lambda layer, args, out: 3 * out)
    assert "layer 0 (Linear) has hooks of its own" in ghost_refusal(nn.Sequential(hooked))


def test_a_layer_run_twice_or_an_input_changed_in_place_is_refused_when_met():
    shared = nn.Linear(3, 3)
    twice = nn.Sequential(shared, nn.Tanh(), shared, nn.Linear(3, 1))
    with pytest.raises(ValueError, match="a layer ran twice in one forward pass"):
        ghost_clipped_sum(twice, dict(twice.named_parameters()), loss_function("regression"), torch.randn(4, 3),
                          torch.randn(4), 1.0)  # fmt: skip

    class ChangesItsInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Linear(3, 3), nn.Linear(3, 1)

        def forward(self, inputs):
            h = torch.tanh(inputs)
            out = self.second(self.first(h))
            h.mul_(2)  # after `first` read it
            return out + h.sum(1, keepdim=True)

    model = ChangesItsInput()
    with pytest.raises(ValueError, match="a layer's input was changed in place after the layer read it"):
        ghost_clipped_sum(model, dict(model.named_parameters()), loss_function("regression"), torch.randn(4, 3),
                          torch.randn(4), 1.0)  # fmt: skip


def test_the_key_takes_only_its_two_values():
    assert resolve({**PARTIAL, "dp-sgd-per-record": "ghost"}).sample_privacy.per_record == "ghost"
    assert resolve(dict(PARTIAL)).sample_privacy.per_record == "vmap"
    with pytest.raises(ConfigError, match="dp-sgd-per-record"):
        resolve({**PARTIAL, "dp-sgd-per-record": "expanded"})


# ---- through the engine: a float64 model of linear layers --------------------------------------------------------
class _DoubleLinear(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.head = nn.Linear(features, 1, bias=False, dtype=torch.float64)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(inputs.flatten(1).double())


def double_linear(input_shape, num_classes, task):
    return _DoubleLinear(math.prod(input_shape))


RUN = {**PARTIAL, "num-clients": 5, "clients-per-round": 4, "synthetic-samples": 12, "batch-size": 4,
       "local-steps": 3, "num-server-rounds": 2, "clip-norm": 0.5, "dp-sgd": True, "dp-sgd-noise": 1.0,
       "dp-sgd-clip": 0.3, "dp-noise-source": "seeded", "model": "tests.test_per_record:double_linear"}  # fmt: skip


def _final_model(config: dict) -> np.ndarray:
    return np.array(run_inprocess(config).x, dtype=np.float64)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedsam"])
def test_a_run_with_ghost_clipping_is_vmaps_alone_and_batched(algorithm):
    """The same seeded run, one client at a time with vmap, one at a time with ghost clipping and batched with ghost
    clipping: the same models to float64 rounding (FedSAM: two private gradients a step)."""
    plain = _final_model({**RUN, "algorithm": algorithm})
    alone = _final_model({**RUN, "algorithm": algorithm, "dp-sgd-per-record": "ghost"})
    batched = _final_model({**RUN, "algorithm": algorithm, "dp-sgd-per-record": "ghost", "batch-clients": True})
    assert np.abs(plain).max() > 0
    assert np.max(np.abs(alone - plain)) <= 1e-12 and np.max(np.abs(batched - plain)) <= 1e-12


def test_a_run_with_ghost_clipping_refuses_a_model_it_does_not_know_before_training():
    config = {**RUN, "algorithm": "fedavg", "dp-sgd-per-record": "ghost",
              "model": "tests.test_batched_dp_sgd:double_split_linear"}  # fmt: skip
    with pytest.raises(ConfigError, match=r"dp-sgd-per-record='ghost': layer \(the model itself\) \(_SplitLinear\)"):
        run_inprocess(config)


class _UsedOutsideItsCall(nn.Module):
    """A layer's weight used again outside the layer's own call: the hooks see only the call."""

    def __init__(self):
        super().__init__()
        self.first, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, inputs):
        h = torch.tanh(self.first(inputs))
        return self.head(h) + nn.functional.linear(h, self.first.weight).sum(1, keepdim=True)


def test_weights_used_outside_their_layers_call_are_caught_by_the_first_steps_check_one_client_or_stacked():
    """The first ghost step of a model checks its first records' norms against their own gradients: here ghost
    clipping would under-count them, so the step is refused (alone and stacked) and nothing is released."""
    torch.manual_seed(3)
    module, loss_fn = _UsedOutsideItsCall(), loss_function("regression")
    assert ghost_refusal(module) is None  # every parameter sits in a Linear: only running it shows the misuse
    inputs, targets = torch.randn(5, 4), torch.randn(5)
    with pytest.raises(ValueError, match=r"differ from the records' own by .* \(relative\): a parameter is used"):
        ghost_clipped_sum(module, dict(module.named_parameters()), loss_fn, inputs, targets, 1.0)
    stacked = StackedModel(FlatModel(_UsedOutsideItsCall()), 2)
    stacked.x.normal_()
    with pytest.raises(ValueError, match="ghost clipping found differ from the records' own"):
        StackedGhost(stacked, loss_fn).clipped_sums(torch.randn(2, 5, 4), torch.randn(2, 5), 1.0)


def test_ghost_clipping_takes_each_records_own_loss_as_vmap_does_ignored_labels_included():
    """Per-position class labels with ignored positions (-100) in unequal numbers per record: the batch's mean loss
    is not the mean of the records' own, and ghost clipping still clips each record's own gradient."""

    class PerPosition(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(2, 3, 3, padding=1)

        def forward(self, inputs):
            return self.conv(inputs)  # (B, 3 classes, T)

    torch.manual_seed(4)
    model = FlatModel(PerPosition().double())
    inputs = torch.randn(6, 2, 8, dtype=torch.float64)
    targets = torch.randint(0, 3, (6, 8))
    for record, kept in enumerate((4, 4, 8, 1, 6, 1)):
        targets[record, kept:] = -100
    loss_fn = loss_function("classification")
    want, clip = _vmap_clipped_sum(model, loss_fn, inputs, targets)
    _, got = dp_sgd.ghost_sum(model, loss_fn, inputs, targets, clip)
    assert torch.allclose(got, want, rtol=0, atol=1e-12 * float(want.abs().max()))


def test_a_record_with_no_gradient_gets_a_finite_share_and_the_norms_are_never_negative():
    from fedsuite.privacy.layer_norms import layer_norms

    layer = nn.Linear(5, 4, bias=False).double()
    a = torch.randn(3, 7, 5, dtype=torch.float64)
    g = torch.randn(3, 7, 4, dtype=torch.float64)
    g[1] = 1e-30 * torch.randn(7, 4, dtype=torch.float64)  # about no gradient: the Gram branch rounds around 0
    norms = layer_norms(layer, ("weight",), a, g)
    assert (norms >= 0).all() and norms[1] < 1e-50


def test_ghost_clipping_refuses_autocast_in_the_config_and_when_it_meets_it():
    from fedsuite.privacy.dp_sgd_checks import config_errors

    errors = config_errors({"dp-sgd": True, "local-steps": 5, "dp-sgd-per-record": "ghost", "autocast": "bf16"})
    assert any(e.startswith("dp-sgd-per-record='ghost' takes no autocast (autocast='bf16')") for e in errors)
    assert not any("autocast" in e for e in config_errors({"dp-sgd": True, "local-steps": 5, "autocast": "bf16"}))
    model = FlatModel(nn.Linear(3, 1), autocast="bf16")
    with pytest.raises(ValueError, match="dp-sgd-per-record='ghost' takes no autocast"):
        dp_sgd.ghost_sum(model, loss_function("regression"), torch.randn(2, 3), torch.randn(2), 1.0)
    with pytest.raises(ValueError, match="takes no autocast"):
        StackedGhost(StackedModel(model, 2), loss_function("regression"))
