"""Random-k with a common mask under SecAgg+ (docs/privacy-secagg.md#compressed-uploads): every client of a round
draws the same k coordinates, only their k values enter the secure sum, and the server scatters the unmasked mean
back. The common mask itself, the refusals of every other compressor, the aggregate against the same round without
SecAgg+ (within the bound below), the bytes that travel, EF21's server estimate, and a real `flwr run` against the
in-process arithmetic.

The bound tested: SecAgg+ gives the mean of the k values within b = δ + ½·ulp32(2r) per value (SecAggSettings.bound,
docs/privacy-secagg.md); the server multiplies it by s = d/k (scaled random-k) or 1 (with error feedback), so each
common coordinate of the aggregate lies within s·b of the plain run's (plus the float32 rounding of the plain run's
decoded values), and every other coordinate is exactly zero in both."""

from __future__ import annotations

import io
import logging
import math
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedsuite import testing as kit
from fedsuite.compression import RandK
from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.privacy.secagg import SecAggSettings
from fedsuite.privacy.secagg_client import SecureUploadRefused, secure_reply
from fedsuite.results import checkpoint
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.compressed_uploads import DecodedUploads
from fedsuite.server.observers import RoundObserver
from fedsuite.server.replies import RejectedReply
from fedsuite.server.wire import array_bytes
from fedsuite.stages.compression import DIM_KEY, SUFFIX, UplinkCompression, upload_vectors

DIM, K = 40, 10
COMMON = {"synthetic-dim": DIM, "num-server-rounds": 1, "client-mapping": "fixed", "compress-up": "randk",
          "compress-up-k": K, "compress-up-mask": "common"}  # fmt: skip
SECURE = {**COMMON, "secagg": True}


@pytest.fixture(autouse=True)
def quiet_flower():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


class Replies(RoundObserver):
    """The replies the rule aggregates, round by round."""

    def __init__(self):
        self.rounds: dict[int, list] = {}

    def replied(self, server_round, replies):
        self.rounds[server_round] = [{k: np.array(v, np.float64) for k, v in r.arrays.items()} for r in replies]


def _coordinates(mask: str, server_round: int, partition_id: int, vector: str = "delta") -> np.ndarray:
    compression = UplinkCompression(RandK(3), "none", seed=11, num_clients=5, mask=mask)
    generator = compression.generator(server_round, partition_id, vector)
    return RandK(3).parts(torch.zeros(50), generator)["indices"].numpy()


# ---- the common mask -----------------------------------------------------------------------------------------
def test_a_common_mask_gives_every_client_of_a_round_the_same_coordinates_and_own_does_not():
    common = [_coordinates("common", 2, pid) for pid in range(5)]
    own = [_coordinates("own", 2, pid) for pid in range(5)]
    assert all(np.array_equal(common[0], c) for c in common[1:])
    assert len({c.tobytes() for c in own}) == 5  # each client its own 3 of 50 coordinates
    assert not np.array_equal(_coordinates("common", 3, 0), common[0])  # a new round, new coordinates
    assert not np.array_equal(_coordinates("common", 2, 0, "delta_c"), common[0])  # each vector its own


def test_the_own_mask_keeps_its_seed_of_run_seed_round_partition_and_vector():
    """'own' is the seed random-k always had: (run seed, round, partition, crc32 of the vector's name, 0xC0)."""
    compression = UplinkCompression(RandK(3), "none", seed=2**40 + 9, num_clients=5)
    words = [9, 2**8, 4, 3, zlib.crc32(b"delta"), 0xC0]
    state = int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0]) % 2**63
    expected = torch.Generator().manual_seed(state)
    assert torch.equal(compression.generator(4, 3, "delta").get_state(), expected.get_state())


# ---- refusals --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"compress-up": "topk", "compress-up-k": 2}, "compress-up='topk' with secagg=true"),
        ({"compress-up": "qsgd"}, "compress-up='qsgd' with secagg=true"),
        ({"compress-up": "sign"}, "compress-up='sign' with secagg=true"),
        ({"compress-up": "randk", "compress-up-k": 2}, "compress-up-mask='own' with compress-up='randk'"),
        ({"compress-up": "randk", "compress-up-k": 2, "compress-up-mask": "own", "compress-feedback": "ef"},
         "compress-up-mask='own' with compress-up='randk'"),
    ],
)  # fmt: skip
def test_secagg_refuses_every_compressor_but_common_random_k_in_one_line(keys, named):
    with pytest.raises(ConfigError) as refused:
        resolve({**kit.LSQ, "client-mapping": "fixed", "secagg": True, **keys})
    lines = [line for line in str(refused.value).splitlines() if "secagg=true" in line]
    assert len(lines) == 1 and named in lines[0], str(refused.value)
    assert "compress-up-mask='common'" in lines[0]  # the message says what is accepted


@pytest.mark.parametrize("feedback", ["none", "ef", "ef21"])
def test_common_random_k_is_accepted_under_secagg(feedback):
    assert resolve({**kit.LSQ, **SECURE, "compress-feedback": feedback})["secagg"] is True


def test_a_refused_secagg_compressor_exits_2_before_training(capsys):
    from simulation.run import main

    config = "dataset='synthetic-lsq' secagg=true client-mapping='fixed' compress-up='randk' compress-up-k=2"
    assert main(["-c", config]) == 2
    assert "compress-up-mask='own'" in capsys.readouterr().err


# ---- one round against the same round without SecAgg+ ----------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "feedback"), [("fedavg", "none"), ("fedavg", "ef"), ("scaffold", "none"), ("fedavg", "ef21")]
)
def test_a_secure_round_aggregates_what_the_plain_round_does_within_the_scaled_bound(algorithm, feedback):
    keys = {**COMMON, "compress-feedback": feedback}
    plain_seen, secure_seen = Replies(), Replies()
    plain = run_inprocess({**kit.LSQ, **keys, "algorithm": algorithm}, observers=[plain_seen])
    secure = run_inprocess({**kit.LSQ, **keys, "algorithm": algorithm, "secagg": True}, observers=[secure_seen])
    scale = DIM / K if feedback == "none" else 1.0  # random-k scaled by d/k, unscaled under error feedback
    bound = scale * SecAggSettings(on=True).bound()
    plain_replies, secure_replies = plain_seen.rounds[1], secure_seen.rounds[1]
    assert len(secure_replies) == len(plain_replies) == kit.LSQ["clients-per-round"]
    for vector in upload_vectors(resolve({**kit.LSQ, **keys, "algorithm": algorithm})):
        singles = np.array([r[vector] for r in plain_replies])
        support = np.flatnonzero(singles[0])
        assert support.size == K and all(np.array_equal(np.flatnonzero(s), support) for s in singles)  # common
        exact = singles.mean(axis=0)
        slack = bound + np.spacing(np.abs(singles).max(axis=0).astype(np.float32))  # plain decodes in float32
        for reply in secure_replies:  # each secure reply holds the mean, on the same coordinates only
            assert np.array_equal(np.flatnonzero(reply[vector]), support)
            assert np.all(np.abs(reply[vector] - exact) <= slack)
        assert np.abs(secure_replies[0][vector] - exact).max() > 0  # the quantisation is there
    assert np.all(np.abs(secure.x - plain.x) <= bound + np.spacing(np.abs(plain.x)))
    assert secure.accepted == plain.accepted


def test_ef21s_server_estimate_stays_the_mean_of_the_clients_estimates_within_the_bound():
    """EF21's server step g + (1/N) Σ_S c_i is linear in the replies, so |S| replies each holding the mean of the c_i
    give it; g stays the mean of the N clients' g_i up to the quantisation, at most (|S|/N)·b a round."""
    cohort, clients = kit.PARTIAL["clients-per-round"], kit.PARTIAL["num-clients"]
    gaps = []

    def g_is_the_mean_of_the_g_i(strategy, server_round):
        g = strategy.state_dict()["compression_estimates"]["delta"]
        held = np.mean([kit.client_vector(strategy, pid, "compression_estimate_delta") for pid in range(clients)], 0)
        float32 = np.spacing(np.float32(np.abs(held).max() + 1.0))  # the clients keep their g_i in float32
        gaps.append(np.abs(g - held).max())
        assert gaps[-1] <= server_round * (cohort / clients * SecAggSettings(on=True).bound() + float32)

    keys = {"client-mapping": "fixed", "secagg": True, "compress-up": "randk", "compress-up-k": 2,
            "compress-up-mask": "common", "compress-feedback": "ef21"}  # fmt: skip
    kit.run_algorithm("fedavg", {**kit.PARTIAL, **keys}, invariants=[g_is_the_mean_of_the_g_i])
    assert len(gaps) == kit.PARTIAL["num-server-rounds"] and max(gaps) > 0


def test_a_secure_run_with_ef21_resumes_exactly(tmp_path):
    keys = {"client-mapping": "fixed", "secagg": True, "compress-up": "randk", "compress-up-k": 2,
            "compress-up-mask": "common", "compress-feedback": "ef21"}  # fmt: skip
    kit.check_checkpoint_round_trip("scaffold", tmp_path, keys, stop_after=2, rounds=4)


# ---- bytes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_bytes_up_are_the_masked_integers_of_the_k_values_k_over_d_of_dense_secagg(algorithm):
    rounds = {"num-server-rounds": 2}
    dense = kit.run_algorithm(algorithm, {**SECURE, **rounds, "compress-up": "none", "compress-up-mask": "own"})
    common = kit.run_algorithm(algorithm, {**SECURE, **rounds})
    plain = kit.run_algorithm(algorithm, {**COMMON, **rounds})
    vectors = len(upload_vectors(resolve({**kit.LSQ, **COMMON, "algorithm": algorithm})))
    for d, c, p in zip(dense.rounds, common.rounds, plain.rounds, strict=True):
        up = c.row["bytes_up_per_client"]
        assert up == vectors * K * 8  # one int64 masked integer per value
        assert d.row["bytes_up_per_client"] == vectors * DIM * 8  # dense SecAgg+: the whole d-vector
        assert up / d.row["bytes_up_per_client"] == pytest.approx(K / DIM, rel=1e-12)
        assert p.row["bytes_up_per_client"] == vectors * RandK(K).encoded_bytes(DIM)  # without SecAgg+: float32


# ---- the two halves' checks ------------------------------------------------------------------------------------
def test_the_client_sends_k_values_and_refuses_a_compressed_array_of_another_length():
    cfg = resolve({**kit.LSQ, **SECURE})
    node = SimpleNamespace(cfg=cfg, model=SimpleNamespace(dim=DIM, buffers=torch.zeros(0)), partition_id=1,
                           noise_secret=0)  # fmt: skip
    names = {"fedsuite.arrays": "delta" + SUFFIX}
    assert secure_reply(node, {"round": 1}, [np.zeros(K, np.float32)], 5, names)[1] == 1
    with pytest.raises(SecureUploadRefused, match=r"expected \(10,\)"):
        secure_reply(node, {"round": 1}, [np.zeros(DIM, np.float32)], 5, names)


def test_the_server_scatters_the_mean_to_the_common_coordinates_and_rejects_another_shape():
    stage = DecodedUploads(UplinkCompression(RandK(K), "none", seed=0, num_clients=5, mask="common", summed=True))
    mean = np.linspace(-1, 1, K)
    metrics = {"partition-id": 3, DIM_KEY: DIM}
    tensors, names, sent = stage.take(1, [array_bytes(mean)], "delta" + SUFFIX, metrics)
    dense = np.load(io.BytesIO(tensors[0]))
    indices = np.flatnonzero(dense)
    assert names == "delta" and sent == 8 * K and indices.size == K
    np.testing.assert_array_equal(dense[indices], mean * DIM / K)
    other, _, _ = stage.take(1, [array_bytes(mean)], "delta" + SUFFIX, {**metrics, "partition-id": 0})
    assert other[0] == tensors[0]  # every reply of the round: the same coordinates
    with pytest.raises(RejectedReply, match="secure mean of 10 values"):
        stage.take(1, [array_bytes(np.zeros(DIM))], "delta" + SUFFIX, metrics)


# ---- a real SecAgg+ round --------------------------------------------------------------------------------------
def test_flwr_run_with_common_random_k_equals_the_inprocess_arithmetic(tmp_path, monkeypatch):
    """`flwr run` with SecAgg+ (Flower's secaggplus_mod and SecAggPlusWorkflow; 3 SuperNodes, 2 rounds of FedAvg)
    and common random-k ends with the in-process arithmetic's model byte for byte, and near the plain run's."""
    from simulation.launcher import launch
    from simulation.launcher.processes import tagged_processes
    from tests.conftest import SESSION

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    cfg = {**kit.LSQ, **SECURE, "algorithm": "fedavg", "num-clients": 3, "clients-per-round": 3,
           "num-server-rounds": 2}  # fmt: skip
    folder = launch.run({**cfg, "checkpoint-every": 2, "out-dir": str(tmp_path), "run-name": "secure"}, quiet=True)
    state = checkpoint.load(Path(folder)).state
    arithmetic = kit.run_algorithm("fedavg", cfg)
    assert state["rule"]["x"].tobytes() == arithmetic.x.tobytes()
    assert state["accepted"] == {0: 2, 1: 2, 2: 2}
    plain = kit.run_algorithm("fedavg", {**cfg, "secagg": False})
    # FedAvg moves x by the mean: R rounds, each off by at most (d/k)·bound per coordinate (√d of them in L2) plus
    # float32 rounding, when the local steps are non-expansive (docs/privacy-secagg.md)
    per_round = DIM / K * SecAggSettings(on=True).bound() + float(np.spacing(np.float32(1.0)))
    assert np.linalg.norm(arithmetic.x.astype(np.float64) - plain.x) <= 2 * math.sqrt(DIM) * per_round
    assert arithmetic.x.tobytes() != plain.x.tobytes()
    assert not tagged_processes(env=SESSION), "the launch left processes of its run running"
