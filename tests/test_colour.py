"""FedMIM's per-client colour perturbation (docs/reference/protocol.md, Partitions), on small synthetic CIFAR-shaped
uint8 images."""

import numpy as np
import pytest
import torch
from torchvision.transforms.functional import adjust_brightness, adjust_saturation

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.data import client_inputs
from fedsuite.data.colour import HIGH, LOW, client_coefficients, perturb
from fedsuite.data.datasets import Images, Split
from fedsuite.node.holdings import ClientNode

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def _cifar_like(n_train=40, n_test=12, seed=0) -> Images:
    g = torch.Generator().manual_seed(seed)
    train = Split(
        torch.randint(0, 256, (n_train, 3, 32, 32), dtype=torch.uint8, generator=g), torch.arange(n_train) % 10
    )
    test = Split(torch.randint(0, 256, (n_test, 3, 32, 32), dtype=torch.uint8, generator=g), torch.arange(n_test) % 10)
    return Images("cifar10", train, test, 10, MEAN, STD, crop_pad=4)


def _normalise(x_uint8: torch.Tensor) -> torch.Tensor:
    x = x_uint8.float() / 255.0
    return (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)


def test_coefficients_are_tied_to_the_client_and_the_seed():
    assert client_coefficients(3, 7) == client_coefficients(3, 7)
    draws = [client_coefficients(3, pid) for pid in range(50)]
    assert len(set(draws)) == 50  # different clients differ
    assert client_coefficients(4, 7) != client_coefficients(3, 7)  # and another seed gives others
    values = np.array(draws)
    assert values.min() >= LOW and values.max() <= HIGH and (LOW, HIGH) == (0.6, 1.4)
    assert values[:, 0].std() > 0.1 and values[:, 1].std() > 0.1  # spread over the range, not a constant
    assert not np.allclose(values[:, 0], values[:, 1])  # brightness and saturation are separate draws


def test_perturb_is_torchvision_brightness_then_saturation_per_image():
    ds = _cifar_like()
    b, s = 1.3, 0.7
    out = perturb(ds.train.x, b, s)
    assert out.dtype == torch.uint8 and out.shape == ds.train.x.shape
    for i in range(len(ds.train)):
        assert torch.equal(out[i], adjust_saturation(adjust_brightness(ds.train.x[i], b), s))
    # the order matters: saturation first would give other images
    assert not torch.equal(out, adjust_brightness(adjust_saturation(ds.train.x, s), b))
    assert not torch.equal(out, ds.train.x)


def test_perturb_refuses_non_rgb_images():
    with pytest.raises(ValueError, match="N×3×H×W"):
        perturb(torch.zeros(2, 1, 28, 28, dtype=torch.uint8), 1.1, 0.9)


def test_client_inputs_apply_the_clients_own_coefficients_before_normalisation():
    ds = _cifar_like()
    test_before = ds.test.x.clone()
    cfg = resolve({"dataset": "cifar10", "colour-perturbation": True, "seed": 5})
    idx = np.array([0, 3, 4, 9, 17])
    for pid in (0, 1):
        b, s = client_coefficients(5, pid)
        want = _normalise(adjust_saturation(adjust_brightness(ds.train.x[idx], b), s))
        assert torch.allclose(client_inputs(cfg, ds, idx, pid, "cpu"), want, atol=1e-6)
    assert not torch.allclose(client_inputs(cfg, ds, idx, 0, "cpu"), client_inputs(cfg, ds, idx, 1, "cpu"))
    off = resolve({"dataset": "cifar10"})
    assert torch.allclose(client_inputs(off, ds, idx, 0, "cpu"), _normalise(ds.train.x[idx]), atol=1e-6)
    # the test set is never perturbed: its uint8 copy is unchanged and its features are the plain ones
    assert torch.equal(ds.test.x, test_before)
    assert torch.allclose(ds.features(ds.test, None, "cpu"), _normalise(test_before), atol=1e-6)


def test_client_node_builds_its_local_data_perturbed_once():
    ds = _cifar_like(n_train=40)
    cfg = resolve({"dataset": "cifar10", "colour-perturbation": True, "seed": 2, "num-clients": 4,
                   "clients-per-round": 2, "partition": "iid"})  # fmt: skip
    node = ClientNode(cfg, partition_id=3, num_partitions=4)
    node.__dict__["dataset"] = ds  # the synthetic set instead of CIFAR files
    node.__dict__["device"] = torch.device("cpu")
    from fedsuite.data import client_partition

    idx = client_partition(cfg, ds)[3]
    b, s = client_coefficients(2, 3)
    want = _normalise(adjust_saturation(adjust_brightness(ds.train.x[torch.as_tensor(idx)], b), s))
    assert torch.allclose(node.data.inputs, want, atol=1e-6)
    assert node.data is node.data  # built once, then cached


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist", "har", "synthetic-lsq"])
def test_colour_perturbation_needs_a_three_channel_image_dataset(dataset):
    with pytest.raises(ConfigError) as exc:
        resolve({"dataset": dataset, "colour-perturbation": True})
    text = str(exc.value)
    assert "colour-perturbation" in text and "cifar10, cifar100, tinyimagenet" in text and dataset in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_perturbation_on_the_training_device_matches_the_cpu():
    ds = _cifar_like()
    cfg = resolve({"dataset": "cifar10", "colour-perturbation": True, "seed": 1})
    idx = np.arange(20)
    on_gpu = client_inputs(cfg, ds, idx, 2, "cuda")
    assert on_gpu.device.type == "cuda"
    assert torch.allclose(on_gpu.cpu(), client_inputs(cfg, ds, idx, 2, "cpu"), atol=1e-5)
