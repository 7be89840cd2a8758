"""Cohort batching (batch-clients=true, fedsuite/batched/, docs/running/batched.md): a round's clients trained as one
stacked computation equal the same clients trained one at a time, for every algorithm of the registry; an algorithm
that cannot be stacked says why in one line and is then byte-identical; failures stay per client; unequal K_i
group by K_i; clipping and SAM use each client's own norm; a plug-in batches or falls back through the kit.

The registry-wide runs build their model in float64 (`double_linear`), so the stacked and the one-at-a-time
arithmetic differ only by float64 rounding; the wire between server and clients is float32, so the final models
compare within TOLERANCE_FLOAT64 (in practice they come out equal). The default float32 model differs by float32
rounding (TOLERANCE_FLOAT32).
"""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedsuite import testing as kit
from fedsuite.batched import dispatch
from fedsuite.batched.loop import train_stacked
from fedsuite.batched.model import StackedModel
from fedsuite.batched.notice import say_unbatched
from fedsuite.batched.stacking import NotStackable, stack_rules
from fedsuite.config.run_config import resolve
from fedsuite.local.adaptive import AdamStep
from fedsuite.local.loop import AddVector, LocalData, SharpnessAware, UpdateRule, train_local
from fedsuite.models.networks import FlatModel
from fedsuite.registry import known as registry
from fedsuite.registry.plugins import AlgorithmRegistry
from tests.arithmetic import FIRST_MACHINE, pins_for_this_machine

TOLERANCE_FLOAT64 = 1e-12
TOLERANCE_FLOAT32 = 1e-6
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# 5 clients, 4 a round, minibatches of 4 from 12 samples, 3 steps, weight decay and a clip that acts: every stage of
# the loop, 2 rounds, so client state written in round 1 is read in round 2.
BASE = {**kit.PARTIAL, "num-clients": 5, "clients-per-round": 4, "synthetic-samples": 12, "batch-size": 4,
        "local-steps": 3, "num-server-rounds": 2, "clip-norm": 0.5}  # fmt: skip
DOUBLE = {**BASE, "model": "tests.test_batched_clients:double_linear", "losac-blocks": 4}
# Algorithms whose clients train one at a time under batch-clients=true, with the reason their log line gives.
FALLS_BACK: dict[str, str] = {}


class _DoubleLinear(nn.Module):
    """The synthetic federations' regression head x ↦ ⟨w, x⟩ in float64."""

    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, 1, bias=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.linear(inputs.flatten(1).double())


def double_linear(input_shape, num_classes, task):
    return _DoubleLinear(math.prod(input_shape)).double()


@pytest.fixture
def stacked_calls(monkeypatch):
    """The size of every group the dispatcher trains stacked, in order."""
    calls: list[tuple[int, int]] = []

    def counting(*args, **kwargs):
        steps = kwargs["settings"].steps if "settings" in kwargs else kwargs["steps"]  # K_i, in either call form
        calls.append((len(args[1]), steps))
        return train_stacked(*args, **kwargs)

    monkeypatch.setattr(dispatch, "train_stacked", counting)
    return calls


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "batch-clients" in r.getMessage()]


def _gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


@pytest.mark.parametrize("name", tuple(registry.ALGORITHMS))
def test_every_algorithm_batched_equals_one_at_a_time(name, stacked_calls, caplog):
    plain = kit.run_algorithm(name, DOUBLE)
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched = kit.run_algorithm(name, {**DOUBLE, "batch-clients": True})
    said = _said(caplog)
    if name in FALLS_BACK:
        assert len(said) == 1 and FALLS_BACK[name] in said[0], said
        assert not stacked_calls
        assert kit.identical(plain.x, batched.x)
        return
    assert not said, said
    assert sum(size for size, _ in stacked_calls) == BASE["clients-per-round"] * BASE["num-server-rounds"]
    for a, b in zip(plain.rounds, batched.rounds, strict=True):
        assert _gap(a.x, b.x) <= TOLERANCE_FLOAT64, f"round {a.round}: {_gap(a.x, b.x):.3e}"
        assert a.row["rejected"] == b.row["rejected"] == 0
        assert a.row["train_loss"] == pytest.approx(b.row["train_loss"], rel=1e-6)


def test_the_float32_model_batched_is_equal_up_to_float32_rounding(stacked_calls):
    for name in ("fedspeed", "fadamgt", "scaffold"):
        plain = kit.run_algorithm(name, BASE)
        batched = kit.run_algorithm(name, {**BASE, "batch-clients": True})
        assert _gap(plain.x, batched.x) <= TOLERANCE_FLOAT32 * max(1.0, float(np.abs(plain.x).max())), name
    assert stacked_calls


# sha256 (first 16 hex digits) of every built-in's final model on BASE, computed on the code before batching existed:
# with batch-clients off, the split client adapter and the shared step function change nothing. Per machine
# arithmetic (tests/arithmetic.py); the second set is the same code's results on an AVX-512 machine, taken at a commit
# whose results still equalled the first set on the first machine.
BEFORE_BATCHING = {
    FIRST_MACHINE: {
        "fedavg": "98c2ff3cd9a08321", "fedprox": "37b0b9a42bc429fe", "fedadam": "9cdf9087e30d4a94",
        "fedyogi": "c80e6c574ebf8305", "fedadagrad": "4312ec72a92ed0d8", "scaffold": "7e826ba04d2d0978",
        "feddyn": "18590e677229a7a8", "fedadmm": "1d24183118d43d9b", "fedcm": "c5ab671dd4ef516e",
        "fedsam": "ffa56c4f1390755e", "mofedsam": "cd9256fc0511ecd0", "fedspeed": "1490bf6c2f53f367",
        "fedspeed-ing": "e8930d57fbf93b5c", "fedmim": "cff1158815b9b5cd", "localadam": "b97ebcfa3d9315b0",
        "fadamet": "8b2b273c39af3b28", "fadamgt": "3579c13b2d6143dd", "fedlada": "85088d6261b05e94",
        "mimesvrg": "cffde873b5eba5c3", "losac": "ed105cf90c194c06", "fedsaga": "117c67d3418affa8",
        "losac-prox": "cc495b25755db6ca", "scaffold-prox": "cc25f5030e398234", "fednova": "98c2ff3cd9a08321",
    },
    "d40024e1326ff257": {
        "fedavg": "04f74d740ad131d1", "fedprox": "30de7f35a55d55ba", "fedadam": "a469fc3a1507fbec",
        "fedyogi": "f6574d35223d8d01", "fedadagrad": "9d86a3a9c5e55768", "scaffold": "cc032d4680d5bec1",
        "feddyn": "d8369b82617006c3", "fedadmm": "440d86c3a054d8a3", "fedcm": "23b0d3fb6d42528d",
        "fedsam": "993dca864e9b40f2", "mofedsam": "9abedd847e4d46c7", "fedspeed": "ae65367c6abdfbf8",
        "fedspeed-ing": "25bf741694726620", "fedmim": "cc725cb02ea8243b", "localadam": "8d0763a9235e4e04",
        "fadamet": "3a1209367f774cfa", "fadamgt": "c88ca5abe0689587", "fedlada": "90293cb691626394",
        "mimesvrg": "cba768f5e51ba811", "losac": "8ffa5e4b813f9b58", "fedsaga": "34e15b92a024e9e2",
        "losac-prox": "fee24fc1af0e144d", "scaffold-prox": "0bbf7a29251d9118", "fednova": "04f74d740ad131d1",
    },
}  # fmt: skip


def test_batching_off_is_byte_identical_to_before():
    cpu = {**BASE, "device": "cpu"}  # the pin is of CPU arithmetic
    machine, pins = pins_for_this_machine(BEFORE_BATCHING)
    now = {name: hashlib.sha256(kit.run_algorithm(name, cpu).x.tobytes()).hexdigest()[:16] for name in pins}
    assert now == pins, f"this machine's arithmetic: {machine}"


def break_client_1_after_training(monkeypatch) -> None:
    """SCAFFOLD's client 1 raises after its training, in every round it is sampled."""
    from fedsuite.clients.scaffold import ScaffoldClient

    real = ScaffoldClient.uplink

    def failing(self, result, rule, ctx):
        if self.node.partition_id == 1:
            raise RuntimeError("client 1 breaks after training")
        return real(self, result, rule, ctx)

    monkeypatch.setattr(ScaffoldClient, "uplink", failing)


def test_a_client_failing_inside_a_batch_is_one_failure(monkeypatch, stacked_calls, caplog):
    break_client_1_after_training(monkeypatch)
    plain = kit.run_algorithm("scaffold", DOUBLE)
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        batched = kit.run_algorithm("scaffold", {**DOUBLE, "batch-clients": True})
    assert [r.row["rejected"] for r in batched.rounds] == [r.row["rejected"] for r in plain.rounds]
    assert sum(r.row["rejected"] for r in batched.rounds) >= 1  # client 1 was sampled and only it failed
    assert any("client 1 breaks after training" in r.getMessage() for r in caplog.records)
    assert _gap(plain.x, batched.x) <= TOLERANCE_FLOAT64
    assert stacked_calls  # its group still trained stacked


def test_a_client_failing_to_prepare_is_one_failure_and_the_rest_batch(monkeypatch, stacked_calls):
    from fedsuite.clients.scaffold import ScaffoldClient

    real = ScaffoldClient.rule

    def failing(self, ctx):
        if self.node.partition_id == 1:
            raise RuntimeError("client 1 breaks before training")
        return real(self, ctx)

    monkeypatch.setattr(ScaffoldClient, "rule", failing)
    plain = kit.run_algorithm("scaffold", DOUBLE)
    batched = kit.run_algorithm("scaffold", {**DOUBLE, "batch-clients": True})
    rejected = [r.row["rejected"] for r in batched.rounds]
    assert rejected == [r.row["rejected"] for r in plain.rounds] and sum(rejected) >= 1
    assert _gap(plain.x, batched.x) <= TOLERANCE_FLOAT64
    assert stacked_calls


def test_a_group_whose_stacked_training_raises_trains_one_at_a_time(monkeypatch, caplog):
    real, calls = StackedModel.loss_and_grad, []

    def broken(self, *args):  # SAM takes two gradients a step: fails in its second step, after two draws
        calls.append(1)
        if len(calls) % 4 == 0:
            raise RuntimeError("no room on the card")
        return real(self, *args)

    monkeypatch.setattr(StackedModel, "loss_and_grad", broken)
    plain = kit.run_algorithm("fedspeed", DOUBLE)
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched = kit.run_algorithm("fedspeed", {**DOUBLE, "batch-clients": True})
    said = _said(caplog)
    assert len(said) == 1 and "raised RuntimeError: no room on the card" in said[0], said
    assert kit.identical(plain.x, batched.x)


def test_unequal_local_work_groups_clients_by_their_k_i(stacked_calls, caplog):
    # K_i drawn once per client on [2, 3] (fedsuite/systems/work.py): 2 for six of the eight clients, 3 for the others
    unequal = {**DOUBLE, "local-work": "uniform", "local-steps-min": 2, "local-steps": 3, "num-clients": 8,
               "clients-per-round": 8, "num-server-rounds": 2}  # fmt: skip
    plain = kit.run_algorithm("scaffold", unequal)
    batched = kit.run_algorithm("scaffold", {**unequal, "batch-clients": True})
    assert _gap(plain.x, batched.x) <= TOLERANCE_FLOAT64
    assert [r.row["train_loss"] for r in batched.rounds] == pytest.approx([r.row["train_loss"] for r in plain.rounds])
    assert sorted(set(stacked_calls)) == [(2, 3), (6, 2)]  # (clients, K_i) of each round's two groups

    stacked_calls.clear()  # on [1, 3]: 1 for five of six clients, 3 for the sixth, which trains alone
    unequal = {**unequal, "local-steps-min": 1, "num-clients": 6, "clients-per-round": 6}
    plain = kit.run_algorithm("scaffold", unequal)
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched = kit.run_algorithm("scaffold", {**unequal, "batch-clients": True})
    assert _gap(plain.x, batched.x) <= TOLERANCE_FLOAT64
    assert sorted(set(stacked_calls)) == [(5, 1)]
    said = _said(caplog)
    assert len(said) == 1 and "no other client of its round shares" in said[0], said


def _clients(dtype=torch.float64):
    """Three least-squares clients whose gradients differ in scale by orders of magnitude, and a model."""
    generator = torch.Generator().manual_seed(7)
    datas = []
    for scale in (0.01, 1.0, 100.0):
        inputs = torch.randn(8, 3, generator=generator, dtype=dtype) * scale
        targets = torch.randn(8, generator=generator, dtype=dtype) * scale
        datas.append(LocalData(inputs, targets))
    model = FlatModel(nn.Linear(3, 1, bias=False).to(dtype))
    return model, datas


def _loss(out, y):
    return 0.5 * torch.nn.functional.mse_loss(out.squeeze(-1), y)


def _one_at_a_time(model, x0s, datas, rules, **settings) -> list[torch.Tensor]:
    out = []
    for c, (x0, data, rule) in enumerate(zip(x0s, datas, rules, strict=True)):
        result = train_local(model, x0, data, _loss, rule, generator=torch.Generator().manual_seed(c), **settings)
        out.append(result.x.clone())
    return out


def test_clipping_and_sam_use_each_clients_own_norm():
    model, datas = _clients()
    x0s = [torch.full((3,), 0.1 * (c + 1), dtype=torch.float64) for c in range(3)]
    settings = dict(lr=0.05, weight_decay=0.01, clip_norm=0.5, epochs=1, steps=4, batch_size=4)

    def rules():
        return [UpdateRule(point=SharpnessAware(0.05, mix=0.5)) for _ in range(3)]

    alone = _one_at_a_time(model, x0s, datas, rules(), **settings)
    generators = [torch.Generator().manual_seed(c) for c in range(3)]
    results = train_stacked(model, x0s, datas, _loss, rules(), generators=generators, **settings)
    for c, result in enumerate(results):
        assert float((result.x - alone[c]).abs().max()) <= TOLERANCE_FLOAT64, c
    # the clip acts on some clients and not on others: a norm over the whole (C, d) matrix would move all alike
    moved = [float((alone[c] - x0s[c]).norm()) for c in range(3)]
    assert max(moved) > 10 * min(moved)


def test_the_stacked_adam_moments_go_back_to_each_clients_own_stage():
    model, datas = _clients()
    x0s = [torch.zeros(3, dtype=torch.float64) for _ in range(3)]
    settings = dict(lr=0.01, weight_decay=0.0, clip_norm=0.0, epochs=1, steps=3, batch_size=4)

    def rules():
        def one(c):
            full = torch.full((3,), float(c), dtype=torch.float64)
            return UpdateRule(step=AdamStep(0.1 * full, 0.9, 0.99, 1e-8), clipped=(AddVector(full),))

        return [one(c) for c in range(3)]

    alone_rules, stacked_rules = rules(), rules()
    _one_at_a_time(model, x0s, datas, alone_rules, **settings)
    generators = [torch.Generator().manual_seed(c) for c in range(3)]
    train_stacked(model, x0s, datas, _loss, stacked_rules, generators=generators, **settings)
    for a, b in zip(alone_rules, stacked_rules, strict=True):
        for name in ("m", "v", "vhat"):  # float64 rounding, relative to the moments' size (v reaches 1e6 here)
            alone, stacked = getattr(a.step, name), getattr(b.step, name)
            scale = max(1.0, float(alone.abs().max()))
            assert float((alone - stacked).abs().max()) <= TOLERANCE_FLOAT64 * scale, name


def test_rules_that_differ_do_not_stack():
    vector = torch.zeros(3)
    with pytest.raises(NotStackable, match="differ in their stages or settings"):
        stack_rules([UpdateRule(clipped=(AddVector(vector, 1.0),)), UpdateRule(clipped=(AddVector(vector, 2.0),))])

    class Unknown:
        def __call__(self, d, ctx):
            pass

    with pytest.raises(NotStackable, match="its stage Unknown is not one the stacked loop knows"):
        stack_rules([UpdateRule(clipped=(Unknown(),))] * 2)


@pytest.fixture
def plugins(monkeypatch):
    """The example plug-ins (examples/fedavgm: FedAvg's client, the built-in FedAvgM's rule extended;
    examples/local_momentum: its own step stage) in a registry of this test's own."""
    monkeypatch.syspath_prepend(str(EXAMPLES / "fedavgm"))
    monkeypatch.syspath_prepend(str(EXAMPLES / "local_momentum"))
    from fedavgm_plugin import algorithm as fedavgm_nesterov
    from local_momentum_plugin import algorithm as localmomentum

    plugged = AlgorithmRegistry([registry.ALGORITHMS[n] for n in registry.ALGORITHMS.built_in], discover=list)
    plugged.register(fedavgm_nesterov())
    plugged.register(localmomentum())
    monkeypatch.setattr(registry, "ALGORITHMS", plugged)


def test_a_plugin_through_the_kit_batches_or_falls_back(plugins, stacked_calls, caplog):
    keys = {"fedavgm-nesterov-beta": 0.5}
    plain = kit.run_algorithm("fedavgm-nesterov", {**DOUBLE, **keys})
    batched = kit.run_algorithm("fedavgm-nesterov", {**DOUBLE, **keys, "batch-clients": True})
    assert stacked_calls and _gap(plain.x, batched.x) <= TOLERANCE_FLOAT64

    stacked_calls.clear()
    keys = {"localmomentum-mu": 0.5}
    plain = kit.run_algorithm("localmomentum", {**DOUBLE, **keys})
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched = kit.run_algorithm("localmomentum", {**DOUBLE, **keys, "batch-clients": True})
    said = _said(caplog)
    assert said == ["fedsuite │ batch-clients: localmomentum trains one client at a time: its stage MomentumStep is "
                    "not one the stacked loop knows"]  # fmt: skip
    assert not stacked_calls and kit.identical(plain.x, batched.x)


def test_a_model_with_buffers_trains_one_at_a_time_and_says_why(caplog):
    bn = {**BASE, "model": "tests.test_flower_app:bn_regressor"}
    plain = kit.run_algorithm("fedavg", bn)
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched = kit.run_algorithm("fedavg", {**bn, "batch-clients": True})
    said = _said(caplog)
    assert len(said) == 1 and "the model has buffers" in said[0], said
    assert kit.identical(plain.x, batched.x)


def test_where_no_engine_batches_the_key_is_ignored_in_one_line(caplog):
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        say_unbatched(resolve({"batch-clients": False}), "client-mapping='fixed' keeps each client on its own node")
        assert not _said(caplog)
        say_unbatched(resolve({"batch-clients": True}), "client-mapping='fixed' keeps each client on its own node")
    assert _said(caplog) == ["fedsuite │ batch-clients=true is ignored: client-mapping='fixed' keeps each client on "
                             "its own node; clients train one at a time (docs/running/batched.md)"]  # fmt: skip


@pytest.mark.parametrize("n,batch,pad", [(30, 8, 0), (30, 8, 2), (6, 8, 2), (6, 6, 0)])
def test_a_round_drawn_at_once_is_the_minibatches_drawn_step_by_step(n, batch, pad):
    """fedsuite/batched/draws.py: the same samples, crops and flips as fedsuite.local.loop.minibatches, and the
    generator left where the step-by-step draws leave it."""
    import torch

    from fedsuite.batched.draws import drawn_round
    from fedsuite.local.loop import LocalData, minibatches

    data = LocalData(torch.randn(n, 3, 5, 5), torch.randint(0, 10, (n,)), crop_pad=pad)
    one, at_once = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    steps = list(minibatches(data, epochs=1, steps=7, batch_size=batch, generator=one))
    inputs, targets = drawn_round(data, 7, batch, at_once)
    assert torch.equal(inputs, torch.stack([s[0] for s in steps]))
    assert torch.equal(targets, torch.stack([s[1] for s in steps]))
    assert torch.equal(one.get_state(), at_once.get_state())


def test_a_downlink_moved_once_per_batched_call_gives_each_client_its_own_equal_copy():
    """Inside one_move_per_array an array seen before is not read again (its first move is copied on the device), each
    caller gets a tensor of its own, never over the host memory; outside, every call reads the array."""
    from fedsuite.local.device import one_move_per_array, to_device

    host = np.arange(6, dtype=np.float32)
    view = host[1:5]
    with one_move_per_array():
        first = to_device(view, torch.device("cpu"))
        host[1:5] = -1.0  # a later read would see this: the block's second call must not read
        second = to_device(host[1:5], torch.device("cpu"))
        first += 100.0  # one caller writing its tensor changes no other's
        third = to_device(view, torch.device("cpu"))
    assert second.tolist() == third.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert first.tolist() == [101.0, 102.0, 103.0, 104.0]
    assert to_device(view, torch.device("cpu")).tolist() == [-1.0] * 4  # outside the block: read again
    assert len({t.data_ptr() for t in (first, second, third)} | {view.__array_interface__["data"][0]}) == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_uplinks_page_locked_buffer_is_reused_only_once_its_array_and_views_are_gone():
    import gc

    from fedsuite.local.device import to_host

    values = torch.arange(1000, dtype=torch.float32, device="cuda")
    first = to_host(values)
    held, address = first[10:20], first.ctypes.data
    del first  # its view still holds the buffer
    second = to_host(values + 1.0)
    assert second.ctypes.data != address and held.tolist() == list(range(10, 20))
    addresses = {address, second.ctypes.data}
    del held, second
    gc.collect()
    third = to_host(values + 2.0)
    assert third.ctypes.data in addresses and third.tolist() == (values + 2.0).tolist()
