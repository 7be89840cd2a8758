"""Compressed broadcasts (docs/running/compression.md#downlink): off builds no stage and keeps no state; the public
copy v̂ ← v̂ + C(v − v̂) lets a full-gradient least-squares federation reach numpy's x* under a top-1 downlink; the
rows count the bytes that travelled (a client's first copy whole, then each round's message, a returning client
the messages it missed while they are cheaper than the copy); every client's copy is the server's, checked by
CRC; a run resumes exactly; bad settings are refused in one line; every algorithm runs with it; and a lost client
copy is a rejected reply, never a silent wrong model."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from fedsuite import testing as kit
from fedsuite.compression import RandK, ScaledSign, TopK
from fedsuite.config.run_config import ALGORITHMS, ConfigError, resolve
from fedsuite.server.compressed_downloads import CompressedBroadcast
from fedsuite.server.stages import server_stages
from fedsuite.stages.compressed_download import CompressedDownload
from fedsuite.stages.downlink import DownlinkCompression, broadcast_vectors, checksum
from fedsuite.state.client_state import ClientState
from fedsuite.state.plan import client_specs

TOP1 = {"compress-down": "topk", "compress-down-k": 1}
GRADIENT_DESCENT = {"local-steps": 1, "lr": 0.3, "num-server-rounds": 150, "eval-every": 1000}
CRC = 4  # bytes of the copy's CRC-32 beside each broadcast vector


@pytest.fixture(autouse=True)
def quiet_flower():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def dim() -> int:
    return int(kit.LSQ["synthetic-dim"])


def test_off_builds_no_stage_and_declares_no_state():
    cfg = resolve({**kit.LSQ, "algorithm": "scaffold"})
    assert not any(isinstance(stage, CompressedBroadcast) for stage in server_stages(cfg))
    assert not any(spec.name.startswith("downlink_") for spec in client_specs(cfg))
    assert CompressedDownload.of_client(cfg, None) is None
    on = resolve({**kit.LSQ, **TOP1, "algorithm": "scaffold"})
    assert broadcast_vectors(on) == ("model", "c")
    assert {spec.name for spec in client_specs(on)} >= {"downlink_model", "downlink_c"}


def test_top_1_downlink_reaches_the_uncompressed_fixed_point():
    """The clients compute gradients at v̂, which the accumulator drives to x: the fixed point is numpy's x*."""
    lsq = kit.least_squares(kit.LSQ)
    compressed = kit.run_algorithm("fedavg", {**GRADIENT_DESCENT, **TOP1})
    assert lsq.relative_error(compressed.x) < 1e-4
    first, later = compressed.rounds[0].row, compressed.rounds[1].row
    assert first["bytes_down_per_client"] == 4 * dim() + CRC  # every client's first copy travels whole
    assert later["bytes_down_per_client"] == TopK(1).encoded_bytes(dim()) + CRC


@pytest.mark.parametrize("compressor", [TopK(2), RandK(2, scaled=False), ScaledSign()])
def test_a_client_gets_the_messages_it_missed_while_they_are_cheaper_than_the_copy(compressor):
    """Server side alone: v̂ moves by the decoded message; a client accepted in round a gets the messages of the
    rounds after a when they are fewer bytes than v̂, else v̂ whole; each message rebuilds the server's copy."""
    d = 64
    stage = CompressedBroadcast(DownlinkCompression(compressor, seed=3, vectors=("model",)))
    rng = np.random.default_rng(0)
    copies = {}
    for server_round in range(1, 9):
        x = rng.normal(size=d).astype(np.float32)
        out, entries = stage.addressed(server_round, 0, server_round - 1, {"model": x})
        copies[server_round] = stage.copies["model"].copy()
        assert entries == {} and "model" not in out
        assert int.from_bytes(out["model@downcrc"].tobytes(), "little") == checksum(copies[server_round])
    whole, size = 4 * d, compressor.encoded_bytes(d)
    for accepted in range(0, 8):
        out, _ = stage.addressed(8, 1, accepted, {"model": x})
        rounds = sorted(int(name.split("@down")[1]) for name in out if name[-1].isdigit())
        missed = 8 - accepted
        if accepted >= stage.since["model"] and missed * size < whole:
            assert rounds == list(range(accepted + 1, 9))
            copy = copies[accepted].copy() if accepted else None
            for r in rounds:  # what the client does: its copy plus each decoded message, in round order
                seed = None if not isinstance(compressor, RandK) else _seed(stage, r)
                from fedsuite.compression.base import Encoded

                copy = copy + compressor.decompress(Encoded(out[f"model@down{r}"].tobytes(), seed), d).numpy()
            assert np.array_equal(copy, copies[8])
        else:
            assert rounds == [] and np.array_equal(out["model@downfull"], copies[8])


def _seed(stage: CompressedBroadcast, server_round: int) -> int:
    from fedsuite.compression.randk import draw_seed

    return draw_seed(stage.compression.generator(server_round, "model"))


def test_every_client_copy_is_the_servers_and_the_catch_up_saves_bytes():
    """Partial participation (3 of 6 a round): no reply is rejected (each client checks its rebuilt copy against the
    server's CRC); after each round the clients it accepted hold the server's copy bit for bit; some client caught
    up on messages, so a round's mean bytes down is below the whole copy's."""
    checked = []

    def clients_hold_the_servers_copy(strategy):
        stage = next(s for s in strategy.stages if isinstance(s, CompressedBroadcast))
        now = max(strategy.accepted.values())
        for pid in [pid for pid, r in strategy.accepted.items() if r == now]:
            for vector in ("model", "c"):
                held = kit.client_vector(strategy, pid, f"downlink_{vector}").astype(np.float32)
                assert np.array_equal(held, stage.copies[vector]), (now, pid, vector)
                checked.append((now, pid))

    keys = {**kit.PARTIAL, "synthetic-dim": 40, "num-server-rounds": 8, "compress-down": "topk", "compress-down-k": 2}
    run = kit.run_algorithm("scaffold", keys, invariants=[clients_hold_the_servers_copy])
    assert all(r.row["rejected"] == 0 and r.row["replies"] == 3 for r in run.rounds)
    assert len({r for r, _ in checked}) == 8
    whole = 2 * (4 * 40 + CRC)
    assert min(r.row["bytes_down_per_client"] for r in run.rounds[1:]) < whole


@pytest.mark.parametrize("keys", [TOP1, {"compress-down": "randk", "compress-down-k": 2}, {"compress-down": "sign"}])
def test_a_compressed_downlink_run_resumes_exactly(tmp_path, keys):
    kit.check_checkpoint_round_trip("scaffold", tmp_path, {**kit.PARTIAL, **keys}, stop_after=3, rounds=6)


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"compress-down": "qsgd"}, "compress-down='qsgd'"),
        ({"compress-down": "topk"}, "compress-down-k=0"),
        ({"compress-down": "randk", "compress-down-k": -2}, "compress-down-k=-2"),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_naming_the_key(keys, named):
    with pytest.raises(ConfigError) as refused:
        resolve({**kit.LSQ, "algorithm": "fedavg", **keys})
    assert len([line for line in str(refused.value).splitlines() if named in line]) == 1, str(refused.value)


def test_k_larger_than_the_model_is_refused_before_training():
    rows = []
    with pytest.raises(ConfigError, match=r"compress-down-k=5: more coordinates than the model's d = 4"):
        kit.run_algorithm("fedavg", {"compress-down": "topk", "compress-down-k": 5}, invariants=[rows.append])
    assert rows == []


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_runs_with_a_compressed_downlink(algorithm):
    keys = {**kit.PARTIAL, "num-server-rounds": 3, "compress-down": "topk", "compress-down-k": 2}
    run = kit.run_algorithm(algorithm, keys)
    assert np.all(np.isfinite(run.x))
    assert all(r.row["rejected"] == 0 and r.row["failures"] == 0 for r in run.rounds)


@pytest.mark.parametrize("messages", [False, True])
def test_batched_clients_rebuild_their_copies_as_one_at_a_time_clients_do(messages):
    keys = {**kit.PARTIAL, "num-server-rounds": 5, "compress-down": "randk", "compress-down-k": 2}
    alone = kit.run_algorithm("scaffold", keys)
    batched = kit.run_algorithm("scaffold", {**keys, "batch-clients": True}, messages=messages)
    np.testing.assert_allclose(batched.x, alone.x, atol=1e-6, rtol=0)  # stacked minibatch steps round differently
    assert all(r.row["rejected"] == 0 for r in batched.rounds)  # every client's copy matched the server's CRC
    assert [r.row["bytes_down_per_client"] for r in batched.rounds] == [
        r.row["bytes_down_per_client"] for r in alone.rounds
    ]


def test_scaffold_keeps_c_as_the_mean_of_the_client_c_i_under_a_compressed_downlink():
    """The clients correct with the copy ĉ, but each uploads its exact Δc_i: c = mean c_i still holds (while the
    copy ĉ differs from c by the server's accumulated error)."""
    gaps = []

    def c_is_the_mean_of_the_c_i(strategy):
        clients = range(strategy.rule.num_clients)
        c_i = np.mean([kit.client_vector(strategy, pid, "c_i") for pid in clients], axis=0)
        assert np.abs(strategy.rule.c - c_i).max() < 1e-6
        copy = next(s for s in strategy.stages if isinstance(s, CompressedBroadcast)).copies["c"]
        gaps.append(np.abs(copy - strategy.rule.c).max())

    keys = {**kit.PARTIAL, "compress-down": "topk", "compress-down-k": 1}
    kit.run_algorithm("scaffold", keys, invariants=[c_is_the_mean_of_the_c_i])
    assert max(gaps) > 1e-4


def test_with_secagg_and_client_level_dp_the_broadcast_is_compressed_all_the_same():
    """The broadcast is post-processing of the server's model: SecAgg+ sums the uploads as before and the accountant
    spends what it spent without compressed broadcasts; the bytes down are the same as without either mechanism."""
    keys = {**kit.PARTIAL, "num-server-rounds": 4, "compress-down": "topk", "compress-down-k": 2}
    plain = kit.run_algorithm("fedavg", keys)
    secure = kit.run_algorithm("fedavg", {**keys, "secagg": True, "client-mapping": "fixed"})
    dp = {"dp": "clients", "dp-noise": 1.0, "dp-clip": 1.0, "dp-noise-source": "seeded"}
    private = kit.run_algorithm("fedavg", {**keys, **dp})
    without = kit.run_algorithm("fedavg", {**kit.PARTIAL, "num-server-rounds": 4, **dp})
    down = [r.row["bytes_down_per_client"] for r in plain.rounds]
    assert [r.row["bytes_down_per_client"] for r in secure.rounds] == down
    assert [r.row["bytes_down_per_client"] for r in private.rounds] == down
    np.testing.assert_allclose(secure.x, plain.x, atol=1e-5, rtol=0)  # SecAgg+'s quantisation only
    assert [r.row["dp_epsilon"] for r in private.rounds] == [r.row["dp_epsilon"] for r in without.rounds]


class _Rule:
    def __init__(self, store):
        self.state = ClientState(store, 5, names=("downlink_model",))


class _Node:
    device = torch.device("cpu")


def test_a_client_that_lost_its_copy_refuses_the_round_instead_of_training_from_a_wrong_model():
    compression = DownlinkCompression(TopK(1), seed=0, vectors=("model",))
    server = CompressedBroadcast(compression)
    x = np.arange(5, dtype=np.float32)
    server.addressed(1, 0, 0, {"model": x})
    out, _ = server.addressed(2, 0, 1, {"model": x + 1})  # a client accepted in round 1 gets round 2's message only
    down = {name: torch.from_numpy(np.array(value)) for name, value in out.items()}
    client = CompressedDownload(compression, _Rule({}))  # ... but holds no copy
    with pytest.raises(ValueError, match="holds no copy of it"):
        client.receive(dict(down), _Node())
    stale = CompressedDownload(compression, _Rule({"downlink_model": np.zeros(5, np.float32)}))
    with pytest.raises(ValueError, match="does not match the server's"):
        stale.receive(dict(down), _Node())
    held = CompressedDownload(compression, _Rule({"downlink_model": x.copy()}))
    received = dict(down)
    held.receive(received, _Node())
    assert np.array_equal(received["model"].numpy(), server.copies["model"]) and list(received) == ["model"]
