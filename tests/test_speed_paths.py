"""The suite's own per-round work made cheaper without changing a number: the final models and every recorded
figure of tiny in-process runs are pinned by hashes taken before the change, and each faster path is checked
against the one it replaces."""

from __future__ import annotations

import hashlib
import json
import zipfile

import numpy as np
import pytest
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)

from fedsuite import testing as kit
from fedsuite.codec.npy_bytes import member_names, read_member
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.buffers import AveragedBuffers
from fedsuite.server.consistency import LEAF, local_consistency
from fedsuite.server.observers import RoundObserver
from fedsuite.server.wire import arrays_of, to_parameters, writable_arrays_of
from tests.arithmetic import FIRST_MACHINE, pins_for_this_machine

BN_MODEL = "tests.test_flower_app:bn_regressor"
PINNED_RUNS = {
    "fedavg": {"algorithm": "fedavg"},
    "scaffold": {"algorithm": "scaffold"},
    "fedspeed": {"algorithm": "fedspeed"},
    "fadamgt": {"algorithm": "fadamgt"},
    "fedmim": {"algorithm": "fedmim"},
    "mimesvrg": {"algorithm": "mimesvrg"},  # a query exchange before each round's training
    "fedavg-batchnorm": {"algorithm": "fedavg", "model": BN_MODEL},  # buffers averaged beside the rule
    "fedavg-both-evaluations": {"algorithm": "fedavg", "evaluation": "both", "eval-every": 1},
    "fedavg-secagg": {"algorithm": "fedavg", "secagg": True, "client-mapping": "fixed"},
}
# sha256 of each run's final model, buffers and recorded figures, taken with the code before these changes, per
# machine arithmetic (tests/arithmetic.py); the second set is the same code's results on an AVX-512 machine, taken at
# a commit whose results still equalled the first set on the first machine
PINNED_HASHES = {
    FIRST_MACHINE: {
        "fedavg": "7ba18fd64718a7d02b9a564db8db0672cdad965624089ca6cc376bf2b0888d66",
        "scaffold": "087da4df3f4a8b3606e2bcabc4e2225dca5b82c548952a13bcb2e320d0ddf3f4",
        "fedspeed": "53b303c13db4eae73f967e1c11305d297d31f0f3a23da7982708510b1eb6d376",
        "fadamgt": "ffbca72dc30ee9d359e442179128b3f11588944dcf5ce6ba37cb1cc569a44eb2",
        "fedmim": "9ac01a01728fb1a0d2bc0c177b04952cb3dad26ccea7a37c7e8931c1351c7177",
        "mimesvrg": "ce1d25ef8e59556881cebd789996b1b10cd686de27cd9fa81c30bec0a23ee4d0",
        "fedavg-batchnorm": "dc95b9409e39f83b54f09e5bd2aa6dbd72bf29cd8c095b8f275c87508d312717",
        "fedavg-both-evaluations": "feed650b49b5ef3ddd96799a466495d3a63b0e5ebbef64d8abd02ce3b5963774",
        "fedavg-secagg": "e6b23b38fc78c7919dc2394a579982d81ea3dad660bd0dc7fc667b183a08f425",
    },
    "d40024e1326ff257": {
        "fedavg": "84865815104edcf1069cc29efb12e0b9ac84f105f9b56d2cbde1f0910c150f33",
        "scaffold": "bff013d443486e88f649428ecadf33255a8f87cf739d11be1018dc79083e2435",
        "fedspeed": "02bd0dfeea77b0b49fff365f02ac83c12566d629f6bf5e6159f7d36015dde921",
        "fadamgt": "5dbd40a3f0adb78d0d5af986cf463a33494ee0a57f6770bab2548d9e107757e2",
        "fedmim": "8f11c12af993d6b126c8b3eda5d258925f352216c68af4993f985c29e299533a",
        "mimesvrg": "141339aa82a928eaffe0d697847c800034eb60dcdca6a6675a7dc87f5af793da",
        "fedavg-batchnorm": "225ac3471861fbf0ec9b6919ea52f9447ffd07bdd9b3a26b124fc9ebb7e05712",
        "fedavg-both-evaluations": "77e471c4cf0ae3bfaea336f8fa1bf887c12c7a79880aa419b084991186baf70b",
        "fedavg-secagg": "1e8aaba0dd0c3d9d6c2406e5ac2bf5c919da0c85ddc72b01063f0ce694bba09b",
    },
}


class Rows(RoundObserver):
    def __init__(self):
        self.rows: list[dict] = []

    def recorded(self, row: dict) -> None:
        self.rows.append(row)


def run_digest(extra: dict) -> str:
    """sha256 of a tiny run's final model, its averaged buffers and every recorded figure except wall times."""
    rows = Rows()
    strategy = run_inprocess({**kit.PARTIAL, **extra}, observers=[rows])
    digest = hashlib.sha256(np.ascontiguousarray(strategy.x, np.float32).tobytes())
    if (averaged := strategy.stage(AveragedBuffers)) is not None:
        digest.update(np.ascontiguousarray(averaged.vector, np.float32).tobytes())
    figures = [{k: v for k, v in sorted(row.items()) if "seconds" not in k} for row in rows.rows]
    digest.update(json.dumps(figures, sort_keys=True, default=repr).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("case", PINNED_RUNS)
def test_final_models_and_figures_are_those_of_before(case):
    """Faster wire, reply checks and round figures: the same model, buffers and rows, bit for bit."""
    machine, pins = pins_for_this_machine(PINNED_HASHES)
    assert run_digest(PINNED_RUNS[case]) == pins[case], f"this machine's arithmetic: {machine}"


def stacked_consistency(deltas: list[np.ndarray]) -> float:
    """The expression the round figure was computed with before (fedsuite/server/consistency.py)."""
    stacked = np.stack(deltas)
    return float(np.mean(np.sum((stacked - stacked.mean(axis=0)) ** 2, axis=1)))


@pytest.mark.parametrize("dim,clients", [(1, 1), (7, 3), (LEAF, 4), (LEAF + 1, 2), (3 * LEAF + 13, 5), (300_007, 10)])
def test_blockwise_local_consistency_is_the_stacked_expression_bit_for_bit(dim, clients):
    rng = np.random.default_rng(dim)
    deltas = [rng.standard_normal(dim) * 10.0 ** rng.uniform(-6, 6, dim) for _ in range(clients)]
    assert local_consistency(deltas) == stacked_consistency(deltas)


WIRE_CASES = {
    "float32 vector": np.arange(11, dtype=np.float32) / 3,
    "empty": np.zeros(0, np.float32),
    "scalar": np.float64(2.5) * np.ones(()),
    "matrix": np.arange(12.0).reshape(3, 4),
    "fortran order": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "strided view": np.arange(10.0)[::2],
    "big-endian ints": np.arange(5, dtype=">i4"),
    "booleans": np.array([True, False]),
    "strings": np.array(["ab", "c"]),
}


@pytest.mark.parametrize("case", WIRE_CASES)
def test_wire_writes_flowers_bytes_and_reads_its_values(case):
    array = WIRE_CASES[case]
    flower = ndarrays_to_parameters([array])
    assert to_parameters([array]) == flower
    for read in (arrays_of(flower)[0], writable_arrays_of(flower)[0]):
        expected = parameters_to_ndarrays(flower)[0]
        assert read.dtype == expected.dtype and read.shape == expected.shape and np.array_equal(read, expected)
    assert writable_arrays_of(flower)[0].flags.writeable


def test_wire_refuses_a_truncated_array_as_numpy_does():
    tensor = ndarrays_to_parameters([np.arange(8.0)]).tensors[0][:-8]
    with pytest.raises(ValueError, match="EOF"):
        arrays_of(Parameters([tensor], "numpy.ndarray"))


def test_wire_refuses_a_negative_dimension_as_numpy_does():
    tensor = ndarrays_to_parameters([np.arange(16.0).reshape(4, 4)]).tensors[0].replace(b"(4, 4)", b"(-1, 4)", 1)
    with pytest.raises(ValueError):
        parameters_to_ndarrays(Parameters([tensor], "numpy.ndarray"))
    with pytest.raises(ValueError):
        arrays_of(Parameters([tensor], "numpy.ndarray"))


def test_npz_members_read_as_numpy_reads_them(tmp_path):
    """fedsuite.codec.npy_bytes reads np.savez's members (client-state files of earlier versions) to np.load's
    values."""
    arrays = {name.replace(" ", "-"): value for name, value in WIRE_CASES.items()}
    path = tmp_path / "numpys.npz"
    np.savez(path, **arrays)
    assert member_names(path) == list(arrays)
    for name, expected in arrays.items():
        read = read_member(path, name)
        assert read.dtype == expected.dtype and read.shape == expected.shape and np.array_equal(read, expected)
    with pytest.raises(KeyError):
        read_member(path, "absent")


def test_a_damaged_npz_member_is_refused(tmp_path):
    path = tmp_path / "state.npz"
    np.savez(path, c_i=np.arange(1000, dtype=np.float32))
    data = bytearray(path.read_bytes())
    data[400] ^= 0xFF  # one byte of the vector flipped in place
    path.write_bytes(bytes(data))
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        read_member(path, "c_i")


def test_an_in_process_fit_returns_what_flowers_wrapper_returns():
    """The direct call gives the client writable arrays of the sent values and returns the wrapper's FitRes."""
    from flwr.client import NumPyClient

    from fedsuite.server import direct_calls

    class Doubler(NumPyClient):
        def fit(self, parameters, config):
            parameters[0] *= 2  # writable, as np.load's arrays are
            return [parameters[0], parameters[1] + 1], 7, {"k": config["k"]}

    ins = FitIns(ndarrays_to_parameters([np.arange(5, dtype=np.float32), np.ones(3)]), {"k": 1})
    direct, flower = direct_calls.fit(Doubler().to_client(), ins), Doubler().to_client().fit(ins)
    assert direct.parameters == flower.parameters and direct.num_examples == flower.num_examples == 7
    assert direct.metrics == flower.metrics and direct.status == flower.status


def test_the_reply_check_still_finds_non_finite_values_where_the_sum_overflows():
    from fedsuite.server.replies import all_finite

    huge = np.full(4, np.finfo(np.float64).max)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.sum(huge)) and all_finite(huge)  # finite terms, an overflowing sum
    assert not all_finite(np.array([1.0, np.nan])) and not all_finite(np.array([np.inf, -np.inf, 1.0]))


def test_a_node_resolves_an_equal_run_config_once():
    from fedsuite.config.run_config import resolve, resolve_cached
    from fedsuite.config.schema import ConfigError

    run_config = {"algorithm": "fedavg", "seed": 3}
    cfg = resolve_cached(run_config)
    assert resolve_cached(dict(run_config)) is cfg and dict(cfg) == dict(resolve(run_config))
    assert resolve_cached({**run_config, "seed": 4}) is not cfg
    resolve_cached({**run_config, "secagg": False})
    with pytest.raises(ConfigError, match="secagg"):  # 0 == False, but 0 is no bool: refused, never the cached one
        resolve_cached({**run_config, "secagg": 0})


def test_fit_results_from_the_wire_unchanged_in_a_rejected_reply():
    """A reply that fails validation is rejected for the same reason as before (the arrays are views now)."""
    from fedsuite.server.replies import RejectedReply, validate

    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.array([1.0, np.nan], np.float32)]), 3,
                 {"fedsuite.arrays": "delta", "partition-id": 0, "steps": 1})  # fmt: skip
    with pytest.raises(RejectedReply, match="non-finite") as err:
        validate(res, lambda pid: ("delta",), {0}, 2)
    assert err.value.diverged


def test_the_clients_finiteness_check_names_the_first_bad_array_and_survives_an_overflowing_sum():
    """fedsuite.node.client.first_not_finite: one sum per array in its dtype; a sum that overflows on finite entries
    is settled entry by entry (no false alarm), a NaN or an inf names its array."""
    import torch

    from fedsuite.node.client import first_not_finite

    big = torch.full((8,), 3e38, dtype=torch.float32)  # finite entries whose float32 sum is inf
    assert first_not_finite({"delta": big, "c": torch.zeros(3)}) is None
    assert first_not_finite({}) is None
    for bad in (float("nan"), float("inf"), -float("inf")):
        poisoned = torch.zeros(5, dtype=torch.float64)
        poisoned[3] = bad
        assert first_not_finite({"delta": big, "delta_c": poisoned, "y": torch.ones(2)}) == "delta_c"


def test_the_replies_float64_copies_reuse_only_buffers_nothing_else_holds():
    """fedsuite.server.wide_copies: a copy is astype(float64) bit for bit; a buffer of the round before is written
    again only when nothing but the pool refers to it; one a rule kept (itself, a slice, a torch view) is left alone."""
    import torch

    from fedsuite.server.wide_copies import WideCopies

    pool = WideCopies()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(1000).astype(np.float32) for _ in range(5)]
    first = [pool.copy(a, 1) for a in arrays]
    assert all(
        c.dtype == np.float64 and np.array_equal(c, a.astype(np.float64)) for c, a in zip(first, arrays, strict=True)
    )
    kept_whole, kept_slice, kept_torch = first[0], first[1][10:20], torch.from_numpy(first[2])
    snapshots = [first[i].copy() for i in range(3)]
    ids = [id(c) for c in first]
    del first
    second = [pool.copy(a[::-1].copy(), 2) for a in arrays]  # round 2: other values
    assert pool.reused == 2 and {id(c) for c in second} & set(ids) == set(ids[3:])  # the two nobody kept
    assert np.array_equal(kept_whole, snapshots[0]) and np.array_equal(kept_slice, snapshots[1][10:20])
    assert np.array_equal(kept_torch.numpy(), snapshots[2])
    assert all(np.array_equal(c, a[::-1].astype(np.float64)) for c, a in zip(second, arrays, strict=True))
    assert pool.copy(np.ones(7, np.float16), 3).dtype == np.float64  # another shape: a fresh buffer


@pytest.mark.parametrize("threads", [1, 3])
def test_cohort_mean_in_blocks_is_the_one_pass_weighted_sum_bit_for_bit(threads, monkeypatch):
    """ServerRule.cohort_mean sums weight·vector a block of coordinates at a time on the block threads: the same
    operations per element, in the same order, as out += np.multiply(weight, vector) over the whole vectors."""
    from types import SimpleNamespace

    from fedsuite.rules.server_rule import ServerRule
    from fedsuite.rules.vectors import HOST
    from fedsuite.server import blockwise

    monkeypatch.setattr(blockwise, "threads", lambda: threads)
    dim = 2 * blockwise.BLOCK + 17
    rng = np.random.default_rng(1)
    replies = [SimpleNamespace(arrays={"delta": rng.standard_normal(dim)}, num_examples=n) for n in (3, 9, 4)]
    rule = SimpleNamespace(dim=dim, settings=SimpleNamespace(expected_cohort=None, weighting="samples"), vectors=HOST)
    rule.cohort_weights = lambda rs: ServerRule.cohort_weights(rule, rs)
    w = np.array([3.0, 9.0, 4.0]) / 16.0
    expected = np.zeros(dim)
    for weight, r in zip(w, replies, strict=True):
        expected += np.multiply(weight, r.arrays["delta"])
    assert np.array_equal(ServerRule.cohort_mean(rule, replies, "delta"), expected)
    assert np.array_equal(ServerRule.cohort_mean(rule, replies, lambda r: r.arrays["delta"]), expected)


@pytest.mark.parametrize("threads", [1, 4])
def test_the_blockwise_reply_checks_and_copies_agree_with_one_pass(threads, monkeypatch):
    """The float64 copy, the finiteness check and the local consistency, on the block threads: the one-pass values."""
    from fedsuite.server import blockwise
    from fedsuite.server.consistency import local_consistency
    from fedsuite.server.replies import all_finite
    from fedsuite.server.wide_copies import WideCopies

    monkeypatch.setattr(blockwise, "threads", lambda: threads)
    rng = np.random.default_rng(2)
    deltas = [rng.standard_normal(3 * blockwise.BLOCK + 5) for _ in range(4)]
    stacked = np.stack(deltas)
    assert local_consistency(deltas) == np.mean(np.sum((stacked - stacked.mean(axis=0)) ** 2, axis=1))
    wide = WideCopies().copy(deltas[0].astype(np.float32), 1)
    assert np.array_equal(wide, deltas[0].astype(np.float32).astype(np.float64))
    bad = deltas[1].copy()
    bad[blockwise.BLOCK + 3] = np.nan
    assert all_finite(deltas[1]) and not all_finite(bad)


def test_a_forked_child_makes_its_own_block_pool(monkeypatch):
    """fedsuite/server/blockwise.py: a child forked after the pool started (a process pool of the benchmarks) must not
    wait on threads it does not have."""
    import multiprocessing

    from fedsuite.server import blockwise

    monkeypatch.setattr(blockwise, "threads", lambda: 2)  # a pool even on a one-core machine (the child inherits it)
    blockwise.each([1, 2, 3], lambda i: i)  # the parent's pool exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        assert pool.apply_async(_sum_in_blocks, ()).get(timeout=60) == float(3 * blockwise.BLOCK)


def _sum_in_blocks() -> float:
    from fedsuite.server import blockwise

    return float(sum(blockwise.each(blockwise.spans(3 * blockwise.BLOCK), lambda span: span[1] - span[0])))
