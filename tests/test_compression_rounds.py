"""Compressed uploads as round stages (docs/running/compression.md): compression off calls no stage; EF21 with a
top-k uplink reaches the uncompressed fixed point of a full-gradient least-squares federation (numpy's x*) where
plain top-k does not; the rows report the bytes that travelled; a compressed run with error feedback resumes
exactly; bad settings are refused in one line naming the key before training; every registered algorithm runs a
round with a top-k uplink; SCAFFOLD's c = mean c_i holds only up to the error feedback's held-back error."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from fedsuite import testing as kit
from fedsuite.compression import QSGD, RandK, ScaledSign, TopK
from fedsuite.config.run_config import ALGORITHMS, ConfigError, resolve
from fedsuite.registry import costs
from fedsuite.server.compressed_uploads import DecodedUploads
from fedsuite.server.stages import server_stages
from fedsuite.stages.compressed_upload import CompressedUpload
from fedsuite.stages.compression import upload_vectors
from fedsuite.state.plan import client_specs

TOPK = {"compress-up": "topk", "compress-up-k": 1}
# FedAvg with one full-batch step per round on all clients: gradient descent, whose fixed point is numpy's x*
GRADIENT_DESCENT = {"local-steps": 1, "lr": 0.3, "num-server-rounds": 150, "eval-every": 1000}


@pytest.fixture(autouse=True)
def quiet_flower():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def lsq_dim() -> int:
    return int(kit.LSQ["synthetic-dim"])


def test_compression_off_builds_no_stage_and_declares_no_state():
    cfg = resolve({**kit.LSQ, "algorithm": "scaffold"})
    assert not any(isinstance(stage, DecodedUploads) for stage in server_stages(cfg))
    assert not any(name.startswith("compression") for name in (spec.name for spec in client_specs(cfg)))
    on = resolve({**kit.LSQ, **TOPK, "algorithm": "scaffold", "compress-feedback": "ef"})
    assert any(isinstance(stage, DecodedUploads) for stage in server_stages(on))
    assert {spec.name for spec in client_specs(on)} >= {"compression_error_delta", "compression_error_delta_c"}
    assert CompressedUpload.of_client(cfg, None) is None


def test_compression_none_is_the_run_without_the_keys_bit_for_bit():
    plain = kit.run_algorithm("fedavg", {"num-server-rounds": 3})
    none = kit.run_algorithm("fedavg", {"num-server-rounds": 3, "compress-up": "none", "compress-up-k": 3})
    assert kit.identical(plain.x, none.x)
    assert [r.row["bytes_up_per_client"] for r in none.rounds] == [4.0 * lsq_dim()] * 3


def test_ef21_with_top_k_reaches_the_uncompressed_fixed_point_where_top_k_alone_does_not():
    lsq = kit.least_squares(kit.LSQ)
    exact = kit.run_algorithm("fedavg", GRADIENT_DESCENT)
    ef21 = kit.run_algorithm("fedavg", {**GRADIENT_DESCENT, **TOPK, "compress-feedback": "ef21"})
    topk = kit.run_algorithm("fedavg", {**GRADIENT_DESCENT, **TOPK})
    assert lsq.relative_error(exact.x) < 1e-4  # the uncompressed method's fixed point is x*
    assert lsq.relative_error(ef21.x) < 1e-4
    assert lsq.relative_error(topk.x) > 1e-2  # the mean of the clients' top-1 vanishes elsewhere
    assert ef21.rounds[-1].row["bytes_up_per_client"] == TopK(1).encoded_bytes(lsq_dim())


@pytest.mark.parametrize(
    ("keys", "compressor"),
    [
        ({"compress-up": "topk", "compress-up-k": 2}, TopK(2)),
        ({"compress-up": "randk", "compress-up-k": 3}, RandK(3)),
        ({"compress-up": "qsgd", "compress-up-levels": 3}, QSGD(3)),
        ({"compress-up": "sign"}, ScaledSign()),
        ({}, QSGD(15)),  # FedPAQ's own default below
    ],
)
def test_the_row_reports_the_encoded_bytes_of_every_upload_vector(keys, compressor):
    algorithm = "scaffold" if keys else "fedpaq"
    run = kit.run_algorithm(algorithm, {**keys, "num-server-rounds": 2})
    vectors = len(upload_vectors(resolve({**kit.LSQ, **keys, "algorithm": algorithm})))
    for observed in run.rounds:
        assert observed.row["bytes_up_per_client"] == vectors * compressor.encoded_bytes(lsq_dim())
        assert observed.row["bytes_down_per_client"] == costs.vectors(algorithm)[0] * 4 * lsq_dim()


@pytest.mark.parametrize("feedback", ["ef", "ef21"])
def test_a_compressed_run_with_error_feedback_resumes_exactly(tmp_path, feedback):
    keys = {"compress-up": "topk", "compress-up-k": 2, "compress-feedback": feedback}
    kit.check_checkpoint_round_trip("scaffold", tmp_path, keys, stop_after=2, rounds=4)


@pytest.mark.parametrize(("algorithm", "keys", "held"), [
    ("scaffold", {"compress-up": "topk", "compress-up-k": 2, "compress-feedback": "ef21"},
     ("c_i", "compression_estimate_delta", "compression_estimate_delta_c")),
    ("fedavg", {"compress-up": "sign", "compress-feedback": "ef"}, ("compression_error_delta",)),
])  # fmt: skip
def test_error_feedback_is_client_state_saved_changed_and_read_back(algorithm, keys, held):
    assert kit.check_client_state(algorithm, keys) == held


def test_random_k_resumes_exactly(tmp_path):
    kit.check_checkpoint_round_trip("fedavg", tmp_path, {"compress-up": "randk", "compress-up-k": 2}, 2, 4)


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"compress-up": "topk"}, "compress-up-k=0"),
        ({"compress-up": "randk", "compress-up-k": -1}, "compress-up-k=-1"),
        ({"compress-up": "qsgd", "compress-up-levels": 0}, "compress-up-levels=0"),
        ({"compress-up": "qsgd", "compress-up-levels": 70000}, "compress-up-levels=70000"),
        ({"compress-up": "lowrank"}, "compress-up='lowrank'"),
        ({"compress-feedback": "ef"}, "compress-feedback='ef'"),
        ({"compress-down": "topk"}, "compress-down-k=0"),
        ({**TOPK, "compress-up-mask": "common"}, "compress-up-mask='common'"),
        ({"compress-down": "qsgd"}, "compress-down='qsgd'"),
        ({**TOPK, "compress-feedback": "ef21", "weighting": "samples"}, "'ef21' with weighting='samples'"),
        (
            {**TOPK, "compress-feedback": "ef21", "algorithm": "losac", "agg-scale": "1/N"},
            "'ef21' with agg-scale='1/N'",
        ),
        ({"compress-up": "qsgd", "dp": "server"}, "compress-up='qsgd' with dp='server'"),
        ({**TOPK, "compress-feedback": "ef", "dp": "server"}, "compress-up='topk' with dp='server'"),
        ({**TOPK, "secagg": True, "client-mapping": "fixed"}, "compress-up='topk' with secagg=true"),
        ({"secagg": True, "client-mapping": "fixed", "algorithm": "fedpaq"}, "compress-up='qsgd' with secagg=true"),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_naming_the_key(keys, named):
    with pytest.raises(ConfigError) as refused:
        resolve({**kit.LSQ, "algorithm": "fedavg", **keys})
    lines = [line for line in str(refused.value).splitlines() if named in line]
    assert len(lines) == 1, str(refused.value)


def test_k_larger_than_the_model_is_refused_before_training():
    rows = []
    with pytest.raises(ConfigError, match=r"compress-up-k=5: more coordinates than the model's d = 4"):
        kit.run_algorithm("fedavg", {"compress-up": "topk", "compress-up-k": 5}, invariants=[rows.append])
    assert rows == []


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_runs_a_round_with_a_top_k_uplink(algorithm):
    keys = {"compress-up": "topk", "compress-up-k": 2, "num-server-rounds": 1}
    run = kit.run_algorithm(algorithm, keys)
    cfg = resolve({**kit.LSQ, **keys, "algorithm": algorithm})
    compressed = upload_vectors(cfg)
    assert compressed, f"{algorithm} uploads nothing to compress"
    assert np.all(np.isfinite(run.x))
    row = run.rounds[0].row
    _, up, some = costs.communication(algorithm, cfg)
    query = up - (len(compressed) - some)  # a server query's answer (MimeSVRG's gradient) travels exact
    sent = (row["vectors_up_per_client"] - query) * TopK(2).encoded_bytes(lsq_dim()) + query * 4 * lsq_dim()
    assert row["bytes_up_per_client"] == pytest.approx(sent, rel=1e-12)


def test_scaffold_keeps_c_as_the_mean_of_the_client_c_i_only_up_to_the_held_back_error():
    """Under top-k with classic error feedback the server adds what arrives of each Δc_i: c = mean c_i − mean e_i,
    e_i the error of Δc_i a client has not sent yet; c = mean c_i itself no longer holds."""
    gaps = []

    def c_and_the_held_back_error(strategy):
        clients = range(strategy.rule.num_clients)
        c_i = np.mean([kit.client_vector(strategy, pid, "c_i") for pid in clients], axis=0)
        held = np.mean([kit.client_vector(strategy, pid, "compression_error_delta_c") for pid in clients], axis=0)
        assert np.abs(strategy.rule.c + held - c_i).max() < 1e-5
        gaps.append(np.abs(strategy.rule.c - c_i).max())

    keys = {"compress-up": "topk", "compress-up-k": 2, "compress-feedback": "ef"}
    kit.run_algorithm("scaffold", {**kit.PARTIAL, **keys}, invariants=[c_and_the_held_back_error])
    assert max(gaps) > 1e-3


def test_with_client_level_dp_compression_is_post_processing_and_the_accountant_is_unchanged():
    dp = {"dp": "clients", "dp-noise": 1.0, "dp-clip": 1.0, "dp-noise-source": "seeded", "num-server-rounds": 2}
    plain = kit.run_algorithm("fedavg", dp)
    compressed = kit.run_algorithm("fedavg", {**dp, **TOPK})
    for a, b in zip(plain.rounds, compressed.rounds, strict=True):
        assert a.row["dp_epsilon"] == b.row["dp_epsilon"]
        assert b.row["bytes_up_per_client"] == TopK(1).encoded_bytes(lsq_dim())


@pytest.mark.parametrize("messages", [False, True])
def test_batched_clients_compress_as_one_at_a_time_clients_do(messages):
    keys = {"compress-up": "randk", "compress-up-k": 2, "compress-feedback": "ef", "num-server-rounds": 3}
    alone = kit.run_algorithm("fedavg", keys)
    batched = kit.run_algorithm("fedavg", {**keys, "batch-clients": True}, messages=messages)
    assert kit.identical(alone.x, batched.x)
    assert [r.row["bytes_up_per_client"] for r in batched.rounds] == [RandK(2).encoded_bytes(lsq_dim())] * 3


def test_the_summary_counts_the_compressed_bytes_toward_its_communication(tmp_path):
    keys = {"compress-up": "qsgd", "compress-up-levels": 3, "num-server-rounds": 2}
    kit.run_algorithm("fedavg", {**keys, "out-dir": str(tmp_path), "run-name": "q"}, record=True)
    summary = json.loads((tmp_path / "q" / "summary.json").read_text())
    assert summary["communication_bytes_per_client"] == 2 * (4 * lsq_dim() + QSGD(3).encoded_bytes(lsq_dim()))


def test_ef21_hands_each_vector_the_mean_of_the_replies_that_carry_it():
    """A vector only some replies carry (a rule's uplink_some, FAdamET's tracking subset) is scaled by how many carry
    it: the mean the rule takes over those replies is the server's new estimate g + (1/N) Σ c_i, as for the rest."""
    from fedsuite.compression.topk import TopK
    from fedsuite.rules.rounds import Reply
    from fedsuite.stages.compression import UplinkCompression

    stage = DecodedUploads(UplinkCompression(TopK(1), "ef21", seed=0, num_clients=10))
    rng = np.random.default_rng(3)
    c = {pid: {"delta": rng.normal(size=4), **({"y_i": rng.normal(size=4)} if pid < 2 else {})} for pid in range(4)}
    replies = [Reply(pid, 1, 1, 0.1, {k: v.copy() for k, v in arrays.items()}) for pid, arrays in c.items()]
    stage.release(1, replies)
    for vector, carriers in (("delta", range(4)), ("y_i", range(2))):
        handed = np.mean([replies[pid].arrays[vector] for pid in carriers], axis=0)
        expected = np.sum([c[pid][vector] for pid in carriers], axis=0) / 10
        np.testing.assert_allclose(handed, expected, rtol=1e-12)
        np.testing.assert_allclose(stage.estimates[vector], expected, rtol=1e-12)
