"""Your own model (docs/own/model.md): import-path factories, BatchNorm buffers averaged beside every algorithm
or kept per client, trainable subsets (frozen backbone, LoRA adapters), and the one-line errors before training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsuite.config.run_config import resolve
from fedsuite.data import LoadedData, load_dataset
from fedsuite.models.networks import ModelError, initial_vector, seeded_model, trainable
from fedsuite.run.inprocess import client_store, remove_client_state, run_inprocess
from fedsuite.server.app import check_model
from fedsuite.server.buffers import AveragedBuffers
from fedsuite.server.observers import RoundObserver
from fedsuite.state.files import read_arrays

HERE = "tests.test_user_models"


# ---- loaders and factories the run configs name -------------------------------------------------------------------
def tiny_images(seed: int = 0) -> LoadedData:
    """3×16×16 images, 3 classes, 24 training samples in three natural groups of 12, 8, 4 (unequal sizes, whole
    batches of 4: BatchNorm on a 1×1 map of two samples is ill-conditioned)."""
    g = torch.Generator().manual_seed(1234)
    x, y = torch.randn(32, 3, 16, 16, generator=g), torch.randint(0, 3, (32,), generator=g)
    groups = np.array(["a"] * 12 + ["b"] * 8 + ["c"] * 4)
    return LoadedData(train=(x[:24], y[:24]), test=(x[24:], y[24:]), num_classes=3, columns={"site": groups})


def averaged(strategy) -> np.ndarray | None:
    """The server's averaged model buffers (buffers='average'), or None."""
    stage = strategy.stage(AveragedBuffers)
    return None if stage is None else stage.vector


def gray_images() -> LoadedData:
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.randint(0, 10, (40,), generator=g)
    return LoadedData(train=(x[:32], y[:32]), test=(x[32:], y[32:]), num_classes=10)


def tokens() -> LoadedData:
    g = torch.Generator().manual_seed(7)
    ids, y = torch.randint(1, 64, (24, 8), generator=g), torch.randint(0, 3, (24,), generator=g)
    return LoadedData(train=(ids[:16], y[:16]), test=(ids[16:], y[16:]), num_classes=3)


def resnet18_bn(num_classes: int) -> nn.Module:
    from torchvision.models import resnet18

    return resnet18(num_classes=num_classes)  # BatchNorm everywhere: buffers


def frozen_backbone(input_shape, num_classes, width: int = 4) -> nn.Module:
    backbone = nn.Sequential(nn.Conv2d(input_shape[0], width, 3, padding=1), nn.ReLU(), nn.Flatten())
    for p in backbone.parameters():
        p.requires_grad_(False)
    head = nn.Linear(width * input_shape[1] * input_shape[2], num_classes)
    return nn.Sequential(backbone, head)


class Logits(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.net(input_ids=ids).logits


def gpt2_lora(num_classes: int) -> nn.Module:
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2ForSequenceClassification

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, num_labels=num_classes,
                        pad_token_id=0, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0)  # fmt: skip
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], task_type="SEQ_CLS", fan_in_fan_out=True)
    return Logits(get_peft_model(GPT2ForSequenceClassification(config), lora))


def raising(num_classes):
    raise RuntimeError("no weights here")


def not_a_module():
    return "a string"


def wrong_outputs(input_shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), 7))


def all_frozen(input_shape, num_classes):
    net = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes))
    return net.requires_grad_(False)


NOT_CALLABLE = 3


# ---- runs ---------------------------------------------------------------------------------------------------------
BASE = {"num-clients": 2, "clients-per-round": 2, "num-server-rounds": 1, "local-epochs": 1, "batch-size": 4,
        "partition": "iid", "device": "cpu", "lr": 0.01}  # fmt: skip


class Replies(RoundObserver):
    def __init__(self):
        self.replies = []

    def replied(self, server_round, replies):
        self.replies = list(replies)


def test_import_path_factory_of_the_builtin_cnn_gives_the_same_numbers():
    cfg = {**BASE, "dataset": f"{HERE}:gray_images"}
    short = run_inprocess({**cfg, "model": "cnn"})
    path = run_inprocess({**cfg, "model": "fedsuite.models.networks:cnn"})
    assert np.array_equal(short.x, path.x) and not np.array_equal(short.x, short.plan.initial_x)
    assert averaged(short) is None  # the built-in CNN has no buffer: nothing travels beside x


def test_factories_taking_kwargs_get_num_classes_only(monkeypatch):
    """torchvision's builders take num_classes through **kwargs and refuse input_shape: named directly, they work."""
    from fedsuite.models import networks as models

    net = models.build_model("torchvision.models:resnet18", (3, 32, 32), 7, "classification")
    assert net.fc.out_features == 7

    def named(input_shape, num_classes, **kwargs):  # a factory naming them gets both, as before
        return nn.Linear(input_shape[0], num_classes, **kwargs)

    monkeypatch.setattr(models, "factory", lambda name: named)
    assert tuple(models.build_model("mine:named", (5,), 3, "classification").weight.shape) == (3, 5)


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_batchnorm_buffers_are_averaged_beside_the_rule_or_kept_per_client(algorithm):
    cfg = {key: value for key, value in BASE.items() if key != "num-clients"}  # natural: N comes from the data
    cfg.update(
        {
            "algorithm": algorithm,
            "dataset": f"{HERE}:tiny_images",
            "model": f"{HERE}:resnet18_bn",
            "partition": "natural",
            "partition-column": "site",
            "clients-per-round": 3,
            "weighting": "samples",
        }
    )
    watch = Replies()
    avg = run_inprocess(cfg, observers=[watch])
    assert avg.plan.sampler.num_clients == 3  # one client per site, from the data
    ds = load_dataset(resolve(cfg))
    start = seeded_model(f"{HERE}:resnet18_bn", ds.input_shape, 3, "classification", 0)
    assert avg.dim == sum(p.numel() for p in trainable(start))  # d counts parameters, never buffers
    sizes = {r.partition_id: r.num_examples for r in watch.replies}
    assert sizes == {0: 12, 1: 8, 2: 4}
    own = [avg.stage(AveragedBuffers).returned[pid] for pid in sorted(sizes)]
    assert not np.array_equal(own[0], own[1])
    expected = sum(sizes[pid] * own[pid].astype(np.float64) for pid in sizes) / 24
    np.testing.assert_allclose(averaged(avg), expected, rtol=1e-6, atol=1e-7)
    assert all(set(r.arrays) == set(avg.rule.uplink) for r in watch.replies)  # the rule never sees buffers

    local = run_inprocess({**cfg, "buffers": "local"}, keep_client_state=True)
    try:
        assert averaged(local) is None
        assert np.array_equal(local.x, avg.x)  # running statistics never enter any algorithm's math
        for pid in range(3):
            kept = client_store(local, pid)["buffers"]
            np.testing.assert_allclose(kept, own[pid], rtol=1e-6, atol=1e-7)  # its own, as trained
            if algorithm == "scaffold":
                assert client_store(local, pid)["c_i"].shape == (local.dim,)
    finally:
        remove_client_state(local)


def test_frozen_backbone_is_never_sent_and_d_is_the_head():
    cfg = {**BASE, "algorithm": "scaffold", "dataset": f"{HERE}:gray_images", "model": f"{HERE}:frozen_backbone",
           "model-args": "{width=3}"}  # fmt: skip
    watch = Replies()
    strategy = run_inprocess(cfg, observers=[watch], keep_client_state=True)
    try:
        head = 3 * 8 * 8 * 10 + 10
        assert strategy.dim == head and strategy.x.size == head
        assert all(a.size == head for r in watch.replies for a in r.arrays.values())
        assert client_store(strategy, 0)["c_i"].shape == (head,)  # client state counts trainable parameters only
        x0 = initial_vector(f"{HERE}:frozen_backbone", (1, 8, 8), 10, "classification", 0, "{width=3}")
        assert x0.numel() == head
    finally:
        remove_client_state(strategy)
    from fedsuite.node.holdings import ClientNode

    node = ClientNode(resolve(cfg), 0, 2)
    again = seeded_model(f"{HERE}:frozen_backbone", (1, 8, 8), 10, "classification", 0, "{width=3}")
    frozen = [p for p in node.model.module.parameters() if not p.requires_grad]
    assert frozen and all(torch.equal(a, b) for a, b in zip(frozen, again[0].parameters(), strict=True))


def test_lora_adapters_on_a_tiny_gpt2_are_the_only_federated_parameters():
    pytest.importorskip("peft")
    cfg = {**BASE, "dataset": f"{HERE}:tokens", "model": f"{HERE}:gpt2_lora"}
    strategy = run_inprocess(cfg)
    net = seeded_model(f"{HERE}:gpt2_lora", (8,), 3, "classification", 0)
    lora = sum(p.numel() for p in trainable(net))
    assert strategy.dim == lora < sum(p.numel() for p in net.parameters()) // 10
    assert not np.array_equal(strategy.x, strategy.plan.initial_x)


@pytest.mark.parametrize(
    "model, args, message",
    [
        ("nowhere.at_all:net", "", "cannot import"),
        (f"{HERE}:NOT_CALLABLE", "", "not callable"),
        (f"{HERE}:raising", "", "no weights here"),
        (f"{HERE}:not_a_module", "", "not a torch.nn.Module"),
        (f"{HERE}:wrong_outputs", "", "outputs of shape (2, 7)"),
        (f"{HERE}:all_frozen", "", "no trainable parameter"),
        (f"{HERE}:frozen_backbone", "{depth=2}", "unexpected keyword argument 'depth'"),
    ],
)
def test_bad_models_fail_in_one_line_naming_the_key(model, args, message):
    cfg = resolve({"dataset": f"{HERE}:gray_images", "model": model, "model-args": args})
    with pytest.raises(ModelError) as err:
        check_model(cfg, load_dataset(cfg))
    text = str(err.value)
    assert message in text and f"model={model!r}" in text and "\n" not in text


def small_bn(input_shape, num_classes) -> nn.Module:
    return nn.Sequential(nn.Conv2d(input_shape[0], 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * input_shape[1] * input_shape[2], num_classes))  # fmt: skip


@pytest.mark.parametrize("buffers", ["average", "local"])
def test_a_resumed_run_with_buffers_equals_the_uninterrupted_one(buffers, tmp_path):
    cfg = {**BASE, "num-clients": 4, "dataset": f"{HERE}:gray_images", "model": f"{HERE}:small_bn",
           "buffers": buffers, "num-server-rounds": 3, "checkpoint-every": 1, "out-dir": str(tmp_path)}  # fmt: skip
    full = run_inprocess({**cfg, "run-name": "full"}, record=True)
    run_inprocess({**cfg, "run-name": "part", "num-server-rounds": 2}, record=True)
    resumed = run_inprocess({**cfg, "run-name": "x", "resume-from": str(tmp_path / "part")}, record=True)
    assert resumed.x.tobytes() == full.x.tobytes()
    if buffers == "average":
        assert averaged(full) is not None and averaged(resumed).tobytes() == averaged(full).tobytes()
    else:
        assert averaged(full) is None and averaged(resumed) is None
        from fedsuite.results import checkpoint

        def kept(folder):
            files = sorted(checkpoint.load(folder).client_state.glob("partition-*.state"))
            return [read_arrays(f)["buffers"].tobytes() for f in files]

        assert kept(tmp_path / "full") and kept(tmp_path / "full") == kept(tmp_path / "part")
