"""Replies kept on the device (fedsuite/batched/device_replies.py, fedsuite/codec/device_arrays.py,
docs/running/batched.md#replies-on-the-device): the in-process batched round's uplinks stay tensors, are checked and
averaged where they are, and give the very models of the host path, for every algorithm of the registry.

On a CUDA card the path is on by itself; here it runs on the CPU (`device_replies.ON_CPU`), the same code. The cohort
means are formed with the host path's operations in its order, so every model is equal bit for bit; the one figure
summed by torch's own reduction, FedMIM's local consistency, equals the host one to float64 rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status

from fedsuite import testing as kit
from fedsuite.batched import device_replies
from fedsuite.codec.device_arrays import DEVICE_FLOOR, DeviceArrays, leaves_floor, room_for
from fedsuite.codec.device_parameters import DeviceParameters
from fedsuite.registry import known as registry
from fedsuite.rules.rounds import Reply
from fedsuite.rules.server_rule import ServerRule, device_mean
from fedsuite.server.consistency import local_consistency, local_consistency_on_device
from fedsuite.server.observers import RoundObserver
from fedsuite.server.replies import RejectedReply, validate
from tests.test_batched_clients import BASE

RELATIVE = 1e-12  # the local-consistency figure: float64 rounding of a sum of squares, in another order
# Algorithms whose uploads a client stage handles (there, the host path: docs/running/batched.md#replies-on-the-device)
HOST_PATH = {"fedpaq": "compress-up='qsgd' by default: the compression stage encodes its uploads"}


class RepliesSeen(RoundObserver):
    """Whether each aggregated round's replies held their arrays on the device."""

    def __init__(self):
        self.kinds: list[bool] = []

    def aggregated(self, server_round, strategy, x_before, replies):
        self.kinds.append(all(isinstance(r.arrays, DeviceArrays) for r in replies))


def _run(name: str, settings: dict, monkeypatch, on_device: bool):
    monkeypatch.setattr(device_replies, "ON_CPU", on_device)
    seen = RepliesSeen()
    return kit.run_algorithm(name, settings, observers=[seen]), seen


def _same_rows(a: dict, b: dict) -> bool:
    """The rounds' rows equal, but for wall times and the local consistency (to RELATIVE)."""
    timed = {"round_seconds", "client_compute_seconds", "client_compute_max_seconds"}
    keys = (set(a) | set(b)) - timed
    for key in keys:
        x, y = a.get(key), b.get(key)
        if key == "local_consistency" and x is not None and y is not None:
            if abs(x - y) > RELATIVE * max(abs(x), abs(y), 1e-300):
                return False
        elif key not in timed and x != y and not (isinstance(x, float) and np.isnan(x) and np.isnan(y)):
            return False
    return True


@pytest.mark.parametrize("name", tuple(registry.ALGORITHMS))
def test_every_algorithm_gives_the_same_models_with_replies_on_the_device(name, monkeypatch):
    settings = {**BASE, "batch-clients": True}
    host, host_seen = _run(name, settings, monkeypatch, on_device=False)
    device, device_seen = _run(name, settings, monkeypatch, on_device=True)
    assert host_seen.kinds and not any(host_seen.kinds)
    if name in HOST_PATH:
        assert device_seen.kinds and not any(device_seen.kinds)
    else:
        assert device_seen.kinds and all(device_seen.kinds)  # the path was taken, every round
    assert len(host.rounds) == len(device.rounds)
    for a, b in zip(host.rounds, device.rounds, strict=True):
        assert kit.identical(a.x, b.x), f"round {a.round}"
        assert _same_rows(a.row, b.row), (a.row, b.row)
    assert kit.identical(host.x, device.x)
    assert kit.identical(host.strategy.state_dict(), device.strategy.state_dict())


def test_a_run_with_client_stages_keeps_the_host_path(monkeypatch):
    """Compressed uploads are the compression stage's to handle: those replies travel as arrays."""
    settings = {**BASE, "batch-clients": True, "compress-up": "topk", "compress-up-k": 3}
    host, _ = _run("fedavg", settings, monkeypatch, on_device=False)
    device, seen = _run("fedavg", settings, monkeypatch, on_device=True)
    assert seen.kinds and not any(seen.kinds)
    assert kit.identical(host.x, device.x)


@pytest.mark.parametrize("settings", [
    {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 0.3, "dp-noise-source": "seeded", "local-steps": 3},
    {"compress-down": "topk", "compress-down-k": 3},
], ids=["dp-sgd", "compressed-download"])  # fmt: skip
def test_a_stage_that_leaves_the_upload_alone_keeps_the_device_path(settings, monkeypatch):
    """DP-SGD's stage refuses, counts and reports, and a compressed download's decodes what arrives: neither touches
    the upload, which stays on the device, and the models are the host path's."""
    pytest.importorskip("dp_accounting")
    settings = {**BASE, "batch-clients": True, **settings}
    host, _ = _run("fedavg", settings, monkeypatch, on_device=False)
    device, seen = _run("fedavg", settings, monkeypatch, on_device=True)
    assert seen.kinds and all(seen.kinds)
    assert kit.identical(host.x, device.x)


def test_which_built_in_stages_handle_the_upload():
    from fedsuite.privacy.dp_sgd import SampleLevelStage
    from fedsuite.privacy.release import ClientLevelRelease
    from fedsuite.privacy.secagg_stage import SecureUpload
    from fedsuite.stages.client import ClientStage, handles_upload
    from fedsuite.stages.compressed_download import CompressedDownload
    from fedsuite.stages.compressed_upload import CompressedUpload
    from fedsuite.stages.model_buffers import ModelBuffers
    from fedsuite.stages.relaxed_init import RelaxedStart

    def bare(cls):  # the hooks are what is asked, not the stage's settings
        return object.__new__(cls)

    assert not handles_upload(bare(SampleLevelStage)) and not handles_upload(bare(CompressedDownload))
    for cls in (ClientLevelRelease, SecureUpload, CompressedUpload, ModelBuffers, RelaxedStart):
        assert handles_upload(bare(cls)), cls.__name__

    class AddsAnArray(ClientStage):
        def uplink(self, result, fit, node):
            return {"extra": result.x}

    assert handles_upload(AddsAnArray()) and not handles_upload(ClientStage())


# ---- the pieces ------------------------------------------------------------------------------------------------
def _replies(vectors, examples) -> list[Reply]:
    pairs = enumerate(zip(vectors, examples, strict=True))
    return [Reply(i, n, 3, 0.1, DeviceArrays({"delta": v})) for i, (v, n) in pairs]


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
@pytest.mark.parametrize("expected_cohort", [None, 7.5])
def test_the_device_mean_is_the_host_mean_bit_for_bit(weighting, expected_cohort):
    generator = torch.Generator().manual_seed(3)
    vectors = [torch.randn(1000, generator=generator) * 10 ** float(k) for k in range(-3, 4)]
    examples = [5, 17, 3, 9, 11, 2, 40]
    device = _replies(vectors, examples)
    host = [Reply(r.partition_id, r.num_examples, 3, 0.1, {"delta": r.arrays["delta"]}) for r in device]
    rule = ServerRule.__new__(ServerRule)
    rule.dim = 1000
    rule.settings = type("S", (), {"weighting": weighting, "expected_cohort": expected_cohort})()
    assert isinstance(host[0].arrays, dict) and host[0].arrays["delta"].dtype == np.float64
    assert kit.identical(rule.cohort_mean(device, "delta"), rule.cohort_mean(host, "delta"))
    weights = None if expected_cohort else rule.cohort_weights(host)
    assert device_mean(vectors, weights, expected_cohort, 1000).dtype == torch.float64  # a tensor, kept where it is


def test_a_rule_reading_a_vector_gets_the_host_paths_float64_copy():
    vector = torch.linspace(-1, 1, 9)
    arrays = DeviceArrays({"delta": vector})
    assert arrays["delta"] is arrays["delta"]  # made once
    assert kit.identical(arrays["delta"], vector.numpy().astype(np.float64))
    assert list(arrays) == ["delta"] and "delta" in arrays and len(arrays) == 1


def test_a_value_a_stage_sets_is_a_host_array_from_then_on():
    arrays = DeviceArrays({"delta": torch.ones(3), "c": torch.zeros(3)})
    arrays["delta"] = np.full(3, 2.0)
    assert not arrays.on_device("delta") and arrays.on_device("c") and list(arrays) == ["delta", "c"]
    assert kit.identical(arrays["delta"], np.full(3, 2.0))
    del arrays["c"]
    assert list(arrays) == ["delta"] and "c" not in arrays and len(arrays) == 1


def test_the_local_consistency_on_the_device_equals_the_host_figure():
    generator = torch.Generator().manual_seed(5)
    deltas = [torch.randn(300_000, generator=generator) for _ in range(6)]
    host = local_consistency([d.numpy().astype(np.float64) for d in deltas])
    assert abs(local_consistency_on_device(deltas) - host) <= RELATIVE * host


def _fit_res(arrays: list[torch.Tensor], names: str = "delta") -> FitRes:
    metrics = {"fedsuite.arrays": names, "partition-id": 0, "steps": 2, "loss": 0.5}
    return FitRes(Status(Code.OK, "Success"), DeviceParameters.of(arrays), 10, metrics)


def test_a_reply_on_the_device_is_checked_as_one_on_the_wire():
    ok = validate(_fit_res([torch.ones(4)]), lambda pid: ("delta",), {0}, 4)
    assert isinstance(ok.arrays, DeviceArrays) and ok.uplink_bytes == 16
    with pytest.raises(RejectedReply, match="non-finite") as bad:
        validate(_fit_res([torch.tensor([1.0, float("nan"), 0, 0])]), lambda pid: ("delta",), {0}, 4)
    assert bad.value.diverged
    with pytest.raises(RejectedReply, match=r"shape \(3,\), expected \(4,\)"):
        validate(_fit_res([torch.ones(3)]), lambda pid: ("delta",), {0}, 4)
    with pytest.raises(RejectedReply, match="expects"):
        validate(_fit_res([torch.ones(4)], "c_i"), lambda pid: ("delta",), {0}, 4)


def test_a_reply_stays_on_a_card_only_while_a_floor_of_its_memory_stays_free():
    total = 100 * 2**30
    assert leaves_floor(50 * 2**30, total, 10 * 2**30)
    assert not leaves_floor(25 * 2**30, total, 10 * 2**30)  # 15 GiB left of 100: under the floor
    assert leaves_floor(int((DEVICE_FLOOR + 0.1) * total), total, int(0.1 * total))
    assert room_for([torch.ones(3)]) and room_for([])  # off a CUDA card: always


def test_a_reply_that_finds_no_room_on_the_card_goes_to_the_host(monkeypatch):
    """Mixed replies (some kept, some on the host) give the host path's means: the same models."""
    from fedsuite.node import client as adapter

    settings = {**BASE, "batch-clients": True}
    host, _ = _run("scaffold", settings, monkeypatch, on_device=False)
    seen_rooms = []

    def every_other(tensors):
        seen_rooms.append(len(seen_rooms) % 2 == 0)
        return seen_rooms[-1]

    monkeypatch.setattr(adapter, "room_for", every_other)
    mixed, seen = _run("scaffold", settings, monkeypatch, on_device=True)
    assert seen_rooms and not any(seen.kinds)  # no round had every reply on the device
    assert kit.identical(host.x, mixed.x)
