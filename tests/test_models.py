"""Models (docs/reference/protocol.md, Datasets and models) and the node's data placement."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedsuite.config.run_config import resolve
from fedsuite.models.networks import FlatModel, build_model, loss_inputs
from fedsuite.node.holdings import ClientNode

FMNIST = Path("/usr/share/datasets/fashion-mnist")


def count(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def test_resnet18_gn_has_groupnorm_everywhere_and_no_buffers():
    net = build_model("resnet18-gn", (3, 32, 32), 10, "classification")
    assert count(net) == 11_181_642
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    norms = [m for m in net.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 20 and all(m.num_groups == 2 for m in norms)  # 17 in blocks/stem + 3 downsample
    assert net.conv1.kernel_size == (7, 7) and net.conv1.stride == (2, 2)  # torchvision stem kept
    FlatModel(net)  # no buffers: averaging flat vectors is valid
    assert build_model("resnet18-gn", (1, 28, 28), 10, "classification")(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_small_models_shapes_and_sizes():
    assert count(build_model("2nn", (1, 28, 28), 10, "classification")) == 784 * 200 + 200 + 200 * 200 + 200 + 2010
    assert count(build_model("cnn", (1, 28, 28), 10, "classification")) == 215_370
    assert count(build_model("logreg", (1, 28, 28), 10, "classification")) == 7850
    assert count(build_model("linear", (20,), 1, "regression")) == 20  # no bias: x* is over d weights
    for name in ("cnn", "2nn", "logreg"):
        out = build_model(name, (3, 32, 32), 100, "classification")(torch.zeros(4, 3, 32, 32))
        assert out.shape == (4, 100)


def test_unknown_model_is_refused_and_buffers_are_kept_beside_x():
    with pytest.raises(ValueError, match="model='vgg'"):
        build_model("vgg", (1, 28, 28), 10, "classification")
    model = FlatModel(nn.BatchNorm1d(3))  # buffers travel beside x (buffers='average' / 'local'), never inside it
    assert model.dim == 6 and model.buffers.numel() == 6  # weight, bias | running_mean, running_var


@pytest.mark.skipif(not FMNIST.is_dir(), reason="Debian dataset-fashion-mnist not installed")
def test_node_trains_on_its_partition_or_on_its_own_data_dir():
    cfg = resolve({"num-clients": 100})
    part = ClientNode(cfg, 7, 100)
    assert len(part.data) == 600 and part.data.inputs.shape == (600, 1, 28, 28)
    assert abs(float(part.data.inputs.mean())) < 0.5  # normalised
    own = ClientNode(cfg, 0, 1, data_dir=str(FMNIST))  # deployment: the node's own copy of the files
    assert len(own.data) == 60_000


def test_channels_last_and_bf16_autocast_are_speed_options_with_float32_state():
    """channels_last leaves the numbers as they are (to float tolerance); bf16 autocast changes them a little, so it
    is off by default; x and the gradient stay float32 in both (the GPU options, docs/running/scale.md)."""
    import torch

    from fedsuite.models.networks import FlatModel, build_model, loss_function

    torch.manual_seed(0)
    inputs, targets = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    loss_fn = loss_function("classification")
    grads = {}
    for name, kwargs in {"plain": {}, "nhwc": {"channels_last": True}, "bf16": {"autocast": "bf16"}}.items():
        torch.manual_seed(1)
        model = FlatModel(build_model("cnn", (1, 28, 28), 10, "classification"), "cpu", **kwargs)
        loss = model.loss_and_grad(loss_fn, inputs, targets)
        assert model.grad.dtype == torch.float32 and loss.dtype == torch.float32
        grads[name] = model.grad.clone()
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    assert rel(grads["nhwc"], grads["plain"]) < 1e-5
    assert 1e-5 < rel(grads["bf16"], grads["plain"]) < 0.1
    with pytest.raises(ValueError, match="autocast='fp8'"):
        FlatModel(build_model("2nn", (1, 28, 28), 10, "classification"), "cpu", autocast="fp8")


def test_the_run_config_reaches_the_clients_model():
    from fedsuite.config.run_config import resolve
    from fedsuite.node.holdings import ClientNode

    cfg = resolve({"dataset": "synthetic-lsq", "num-clients": 2, "clients-per-round": 2, "autocast": "bf16",
                   "channels-last": True})  # fmt: skip
    model = ClientNode(cfg, 0, 2).model
    assert model.autocast == "bf16" and model.channels_last


@pytest.mark.parametrize("target_dtype", [torch.float64, torch.float32])
def test_a_float64_models_loss_and_gradient_stay_in_float64(target_dtype):
    """The least-squares gradient Xᵀ(Xw − y)/n to float64 rounding, with float64 targets or float32 ones (widened,
    never the output narrowed): an output narrowed to float32 before the loss (as autocast's bfloat16 is widened)
    would be off by about 1e-8 relative, and two float dtypes in one loss fail in torch 2.11's backward."""
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(16, 4, generator=generator, dtype=torch.float64)
    targets = torch.randn(16, generator=generator, dtype=torch.float64).to(target_dtype)
    model = FlatModel(nn.Linear(4, 1, bias=False).to(torch.float64))
    model.x.copy_(torch.randn(4, generator=generator, dtype=torch.float64) * 1e3)

    def loss_fn(out, y):
        return 0.5 * torch.nn.functional.mse_loss(out.squeeze(-1), y)

    loss = model.loss_and_grad(loss_fn, inputs, targets)
    residual = inputs @ model.x - targets.double()
    assert loss.dtype == torch.float64
    expected = inputs.T @ residual / len(targets)
    assert float((model.grad - expected).abs().max()) <= 1e-12 * float(expected.abs().max())
    assert float(loss) == pytest.approx(0.5 * float((residual**2).mean()), rel=1e-14)


def test_the_loss_takes_output_and_targets_in_one_dtype():
    half = torch.ones(3, dtype=torch.bfloat16)
    labels = torch.tensor([0, 2, 1])
    assert [t.dtype for t in loss_inputs(half, labels)] == [torch.float32, torch.int64]  # labels left alone
    single, double = torch.ones(3), torch.ones(3, dtype=torch.float64)
    assert [t.dtype for t in loss_inputs(single, double)] == [torch.float64, torch.float64]
    assert [t.dtype for t in loss_inputs(double, single)] == [torch.float64, torch.float64]
    out, targets = loss_inputs(single, single)
    assert out is single and targets is single  # the usual case: nothing made
