"""Client state: the store's backends, state invariants under partial participation and failures, persistence
across rounds (per-partition files in RAM or on disk), and communication per round against the summary table of
docs/algorithms/index.md."""

from __future__ import annotations

import errno
import json
import os
import re

import numpy as np
import pytest
import torch

from fedsuite.clients.scaffold import ScaffoldClient
from fedsuite.config.run_config import resolve
from fedsuite.data import load_dataset
from fedsuite.registry import costs
from fedsuite.registry.known import ALGORITHMS
from fedsuite.run.inprocess import client_store, remove_client_state, run_inprocess
from fedsuite.server.sampling import Sampler
from fedsuite.state import file_tier
from fedsuite.state import store as state_module
from fedsuite.state.files import StateFileError, read_arrays
from fedsuite.state.store import (
    ClientState,
    DiskStore,
    choose_backend,
    describe,
    effective,
    state_bytes,
    state_files,
    state_root,
)
from tests.observing import Rows, Watch

SMALL = {
    "dataset": "synthetic-lsq",
    "num-clients": 8,
    "sampling": "bernoulli",
    "participation": 0.4,
    "synthetic-dim": 6,
    "synthetic-samples": 16,
    "batch-size": 4,
    "local-steps": 5,
    "lr": 0.03,
    "num-server-rounds": 7,
    "eval-every": 1000,
}


def stored(strategy, pid: int, name: str) -> np.ndarray:
    store = client_store(strategy, pid)
    return np.asarray(store[name], np.float64) if name in store else np.zeros(strategy.dim)


def disk_stored(folder, pid: int, name: str, dim: int) -> np.ndarray:
    store = DiskStore(folder, pid)
    return np.asarray(store[name], np.float64) if name in store else np.zeros(dim)


# ---- the store ---------------------------------------------------------------------------------------------
def test_disk_store_round_trip_and_atomic_replace(tmp_path):
    store = DiskStore(tmp_path, 3)
    assert len(store) == 0 and not store.path.exists()
    store["c_i"] = np.arange(4, dtype=np.float32)
    store.flush()
    again = DiskStore(tmp_path, 3)
    np.testing.assert_array_equal(again["c_i"], np.arange(4))
    again["c_i"] = np.ones(4, np.float32)
    again.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partition-000003.state"]  # no temp files left
    np.testing.assert_array_equal(DiskStore(tmp_path, 3)["c_i"], np.ones(4))


def test_a_state_file_holds_any_numeric_array_and_refuses_others(tmp_path):
    arrays = {"c_i": np.arange(5, dtype=np.float32) / 3, "empty": np.zeros(0, np.float32), "write-round":
              np.array([7], np.int64), "scalar": np.float64(2.5) * np.ones(()), "matrix": np.arange(12.0).reshape(3, 4),
              "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "big-endian": np.arange(3, dtype=">i4"),
              "flags": np.array([True, False]), "complex": np.array([1 + 2j])}  # fmt: skip
    store = DiskStore(tmp_path, 1)
    store.update(arrays)
    store.flush()
    again = DiskStore(tmp_path, 1)
    assert list(again) == list(arrays)
    for name, expected in arrays.items():
        assert again[name].dtype == expected.dtype and again[name].shape == expected.shape
        np.testing.assert_array_equal(again[name], expected)
        assert again[name].flags.writeable
    store["names"] = np.array(["a"], dtype=object)
    with pytest.raises(TypeError, match="'names' has dtype object"):
        store.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partition-000001.state"]  # the file before, nothing else


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: os.truncate(p, p.stat().st_size - 1), r"partition-000002\.state is corrupt: \d+ bytes, its header "
                                                          r"says \d+ \(truncated or appended to\)"),
        (lambda p: p.write_bytes(p.read_bytes() + b"x"), r"\(truncated or appended to\)"),
        (lambda p: os.truncate(p, 5), r"partition-000002\.state is not a fedsuite client-state file"),
        (lambda p: p.write_bytes(b"PK\x03\x04" + p.read_bytes()[4:]), "is not a fedsuite client-state file"),
        (lambda p: p.write_bytes(p.read_bytes().replace(b'"shape": [4]', b'"shape": [9]')),
         r"member 'c_i' does not fit its header"),
        (lambda p: p.write_bytes(p.read_bytes().replace(b'"members"', b'"membres"')), "its header cannot be read"),
    ],
)  # fmt: skip
def test_a_damaged_state_file_is_refused_naming_it(tmp_path, damage, message):
    store = DiskStore(tmp_path, 2)
    store["c_i"] = np.arange(4, dtype=np.float32)
    store.flush()
    damage(store.path)
    with pytest.raises(StateFileError, match=message):
        DiskStore(tmp_path, 2)["c_i"]


def crafted(path, header: bytes, data: int) -> None:
    """A file with this format's mark, the given header and `data` zero bytes after the aligned start."""
    from fedsuite.state.files import ALIGN, MAGIC

    lead = MAGIC + len(header).to_bytes(8, "little") + header
    path.write_bytes(lead + b"\0" * (-len(lead) % ALIGN) + b"\0" * data)


def member(**fields) -> bytes:
    entry = {"name": "c_i", "dtype": "<f4", "shape": [4], "offset": 0, "bytes": 16, **fields}
    return json.dumps({"members": [entry], "end": 64}).encode()


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (member(shape=[-2, -2]), "is not a non-negative integer"),
        (member(shape=[2**40, 2**40]), "'c_i' does not fit its header"),
        (member(shape="4"), "'c_i' does not fit its header"),
        (member(shape=[4.0]), "is not a non-negative integer"),
        (member(dtype="O"), "'c_i' does not fit its header"),
        (member(dtype="V16", shape=[1]), "'c_i' does not fit its header"),
        (member(dtype="(2,)<f4", shape=[2]), "'c_i' does not fit its header"),
        (member(dtype=None), "its header cannot be read"),
        (member(offset=60), "'c_i' does not fit its header"),
        (member(name=7), "'7' does not fit its header"),
        (member(bytes=True), "is not a non-negative integer"),
        (b'{"members": [], "end": 1e400}', "is not a non-negative integer"),
        (b"[" * 100_000 + b"]" * 100_000, "its header cannot be read"),
        (json.dumps({"members": [json.loads(member())["members"][0]] * 2, "end": 64}).encode(),
         "'c_i' does not fit its header"),
    ],
)  # fmt: skip
def test_a_hostile_header_is_refused_naming_the_file(tmp_path, header, message):
    path = tmp_path / "partition-000005.state"
    crafted(path, header, 64)
    with pytest.raises(StateFileError, match=r"partition-000005\.state .*" + re.escape(message)):
        state_module.DiskStore(tmp_path, 5)["c_i"]


def test_a_header_longer_than_the_file_and_a_file_replaced_while_read_are_refused(tmp_path):
    path = tmp_path / "partition-000005.state"
    crafted(path, member(), 64)
    data = bytearray(path.read_bytes())
    data[8:16] = (2**62).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(StateFileError, match="its header would be"):
        DiskStore(tmp_path, 5)["c_i"]
    crafted(path, member(), 64)
    store = DiskStore(tmp_path, 5)
    assert list(store) == ["c_i"]  # indexed, not read yet
    other = DiskStore(tmp_path, 5)
    other["c_i"] = np.ones(4, np.float32)
    other.flush()  # another writer replaced the file
    with pytest.raises(StateFileError, match="changed while it was read"):
        store["c_i"]


def test_a_partition_file_of_an_earlier_version_is_read_and_replaced_by_the_first_write(tmp_path):
    np.savez(tmp_path / "partition-000004.npz", c_i=np.full(3, 2.0, np.float32))
    assert [p.name for p in state_files(tmp_path)] == ["partition-000004.npz"]
    state = ClientState(DiskStore(tmp_path, 4), 3)
    np.testing.assert_array_equal(state.get("c_i").numpy(), np.full(3, 2.0))
    state.set("c_i", state.get("c_i") + 1)
    state.save()
    assert [p.name for p in tmp_path.iterdir()] == ["partition-000004.state"]
    np.testing.assert_array_equal(DiskStore(tmp_path, 4)["c_i"], np.full(3, 3.0))
    np.savez(tmp_path / "partition-000004.npz", c_i=np.zeros(3, np.float32))  # both kinds: the newer format wins
    both = DiskStore(tmp_path, 4)
    np.testing.assert_array_equal(both["c_i"], np.full(3, 3.0))
    both.flush()
    assert [p.name for p in tmp_path.iterdir()] == ["partition-000004.state"]


def test_client_state_is_lazy_zeros_and_saves_to_its_partition_file(tmp_path):
    state = ClientState(DiskStore(tmp_path, 2), dim=5)
    assert not state.has("c_i") and np.array_equal(state.get("c_i").numpy(), np.zeros(5))
    assert not any(tmp_path.iterdir())  # nothing is created until a save
    state.set("c_i", state.get("c_i") + 2.0)
    state.save()
    np.testing.assert_array_equal(ClientState(DiskStore(tmp_path, 2), 5).get("c_i").numpy(), np.full(5, 2.0))


def test_state_folders_memory_in_ram_per_run_disk_where_configured(tmp_path):
    """memory: a per-run folder in /dev/shm (RAM) where the machine has one; disk: client-state-dir if set."""
    memory = state_root("memory", str(tmp_path), 7)
    assert memory.name == "run-7" and state_module.is_run_scoped(memory, 7)
    if state_module.SHARED_MEMORY.is_dir():
        assert memory.is_relative_to(state_module.SHARED_MEMORY)
    assert state_root("disk", str(tmp_path), 7) == tmp_path and not state_module.is_run_scoped(tmp_path, 7)
    assert state_root("disk", "", 7).name == "run-7" and state_root("disk", "", 7) != memory


def test_memory_estimate_and_backend_choice():
    assert state_bytes(100, 215_370, 1) == 2 * 86_148_000  # the vectors + the last confirmed ones
    assert choose_backend("auto", 100, 215_370, 1, budget_mb=4096) == "memory"
    assert choose_backend("auto", 500, 11_181_642, 1, budget_mb=4096) == "disk"  # ResNet-18 SCAFFOLD: 22 GB
    assert choose_backend("memory", 500, 11_181_642, 1, budget_mb=1) == "memory"
    assert "= 42,654.6 MiB → on disk" in describe("auto", 500, 11_181_642, 1, 4096)


# ---- invariants (docs/developer/verification.md) ---------------------------------------------------------------
def fail_in_round(monkeypatch, partition: int, server_round: int):
    """Partition `partition` crashes after local training in `server_round` (before its state is saved)."""
    original = ScaffoldClient.uplink

    def uplink(self, result, rule, ctx):
        if self.node.partition_id == partition and ctx.round == server_round:
            raise RuntimeError("client crashed")
        return original(self, result, rule, ctx)

    monkeypatch.setattr(ScaffoldClient, "uplink", uplink)


def test_scaffold_c_is_the_mean_of_all_client_c_i_after_every_round(monkeypatch):
    cfg = {**SMALL, "algorithm": "scaffold"}
    crashing = Sampler(8, "bernoulli", participation=0.4, seed=0).cohort(2)[0]
    fail_in_round(monkeypatch, partition=crashing, server_round=2)
    gaps, failures = [], []

    def checked(server_round, strategy, x_before, replies):
        mean_ci = np.mean([stored(strategy, pid, "c_i") for pid in range(8)], axis=0)
        gaps.append(np.abs(strategy.rule.c - mean_ci).max())

    def counting(row):
        if row["round"] > 0:
            failures.append(row["failures"] + row["rejected"])  # a crash comes back as an error reply

    strategy = run_inprocess(cfg, observers=[Watch(aggregated=checked, recorded=counting)])
    assert len(gaps) == 7 and max(gaps) < 1e-6
    assert sum(failures) >= 1  # the crash happened and was survived
    assert np.abs(strategy.rule.c).max() > 1e-3  # c is not trivially zero


def test_an_unconfirmed_write_is_undone_and_a_confirmed_one_kept(tmp_path):
    store = DiskStore(tmp_path, 0)
    first = ClientState(store, dim=3)
    first.accepted_round = 0
    first.set("c_i", torch.ones(3))
    first.save(server_round=1)  # written before the server has seen the reply
    assert np.array_equal(store["c_i"], np.ones(3)) and "absent:c_i" in store

    rejected = ClientState(store, dim=3)
    rejected.accepted_round = 0  # round 1's reply was not accepted
    assert not rejected.has("c_i") and np.array_equal(rejected.get("c_i").numpy(), np.zeros(3))
    rejected.set("c_i", torch.full((3,), 2.0))
    rejected.save(server_round=4)
    assert np.array_equal(effective(store, 4)["c_i"], np.full(3, 2.0))  # what a confirmation would keep
    assert np.array_equal(effective(store, 0).get("c_i", np.zeros(3)), np.zeros(3))

    confirmed = ClientState(store, dim=3)
    confirmed.accepted_round = 4
    assert np.array_equal(confirmed.get("c_i").numpy(), np.full(3, 2.0))
    confirmed.save()  # a save without a round (no server) keeps no copies
    assert sorted(store) == ["c_i"]


def reject_in_round(partition: int, server_round: int) -> Watch:
    """The server rejects `partition`'s reply in `server_round` after the client has saved its new state."""

    def rejecting(this_round, reply):
        return "rejected by the test" if (reply.partition_id, this_round) == (partition, server_round) else None

    return Watch(screen=rejecting)


def mean_state_gaps(cfg: dict, server_mean, name: str, faults: tuple = ()) -> list[float]:
    """After every round: max |server_mean(rule) − mean_N of each client's `name`|, where a client's vector is
    the one it will train with next (fedsuite.state.store.effective, given the rounds the server accepted)."""
    gaps = []

    def checked(server_round, strategy, x_before, replies):
        views = [effective(client_store(strategy, pid), strategy.accepted.get(pid, 0))
                 for pid in range(cfg["num-clients"])]  # fmt: skip
        client_mean = np.mean([v.get(name, np.zeros(strategy.dim)) for v in views], axis=0)
        gaps.append(np.abs(server_mean(strategy.rule) - client_mean).max())

    run_inprocess(cfg, observers=[*faults, Watch(aggregated=checked)])
    return gaps


def test_a_rejected_reply_does_not_leave_the_client_ahead_of_the_server(monkeypatch):
    """SCAFFOLD's c = mean_N c_i after every round although the server rejects one client's reply in round 2
    (a client that saved c_i⁺ before the server said no); with the undo switched off the invariant breaks."""
    import fedsuite.state.tier as state_module

    cfg = {**SMALL, "algorithm": "scaffold", "min-replies": 0.0}
    fault = reject_in_round(Sampler(8, "bernoulli", participation=0.4, seed=0).cohort(2)[0], 2)
    gaps = mean_state_gaps(cfg, lambda rule: rule.c, "c_i", (fault,))
    assert len(gaps) == 7 and max(gaps) < 1e-6
    monkeypatch.setattr(state_module, "settle", lambda store, accepted_round: None)
    assert max(mean_state_gaps(cfg, lambda rule: rule.c, "c_i", (fault,))) > 1e-3


def test_feddyn_paper_and_code_forms_agree_after_every_round():
    """mean_N(h_i) with h_i = −∇L_i/α_d (client duals) equals the server's Σ h_i / N (= −h/α_d of the paper)."""
    alpha = 0.2
    cfg = {**SMALL, "algorithm": "feddyn", "feddyn-alpha": alpha}
    gaps = []

    def checked(server_round, strategy, x_before, replies):
        h_clients = np.mean([-stored(strategy, pid, "dual") / alpha for pid in range(8)], axis=0)
        gaps.append(np.abs(h_clients - strategy.rule.h_sum / strategy.rule.num_clients).max())

    strategy = run_inprocess(cfg, observers=[Watch(aggregated=checked)])
    assert len(gaps) == 7 and max(gaps) < 1e-6 and np.abs(strategy.rule.h_sum).max() > 1e-3


def test_fedadmm_model_is_the_mean_of_all_augmented_models():
    cfg = {**SMALL, "algorithm": "fedadmm"}
    strategy = run_inprocess(cfg, keep_client_state=True)
    x0 = strategy.plan.initial_x.astype(np.float64)
    xhat = [stored(strategy, pid, "xhat") if "xhat" in client_store(strategy, pid) else x0 for pid in range(8)]
    remove_client_state(strategy)
    np.testing.assert_allclose(strategy.x, np.mean(xhat, axis=0), atol=1e-6)


# ---- persistence ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["memory", "disk"])
def test_client_state_is_what_it_was_when_the_client_last_trained(mode, tmp_path):
    """c_i starts at 0 and moves by Δc_i only when client i trains: so c_i = Σ of its own uploads."""
    cfg = {**SMALL, "algorithm": "scaffold", "client-state": mode, "client-state-dir": str(tmp_path)}
    uploads: dict[int, list[np.ndarray]] = {}

    def record(server_round, replies):
        for r in replies:
            uploads.setdefault(r.partition_id, []).append(r.arrays["delta_c"])

    strategy = run_inprocess(cfg, observers=[Watch(replied=record)], keep_client_state=True)
    root = strategy.plan.client_state_root
    assert (root == tmp_path) == (mode == "disk")  # memory: a per-run folder in RAM, not client-state-dir
    assert 0 < len(uploads) < cfg["num-clients"] or len(uploads) == cfg["num-clients"]
    for pid in range(cfg["num-clients"]):
        c_i = disk_stored(root, pid, "c_i", strategy.dim)
        expected = np.sum(uploads.get(pid, [np.zeros(strategy.dim)]), axis=0)
        np.testing.assert_allclose(c_i, expected, atol=1e-6)
        assert (pid in uploads) == (np.abs(c_i).max() > 0)  # created lazily, on first participation only
    assert {int(p.stem.split("-")[1]) for p in root.glob("partition-*.state")} == set(uploads)
    if mode == "memory":
        remove_client_state(strategy)
        assert not any(tmp_path.iterdir())


# ---- communication per round (docs/algorithms/index.md, docs/developer/verification.md) -------------------------
SUMMARY_TABLE = {  # docs/algorithms/index.md: (vectors down, vectors up) per participating client per round
    "fedavg": (1, 1), "fedprox": (1, 1), "fedadam": (1, 1), "fedyogi": (1, 1), "fedadagrad": (1, 1),
    "scaffold": (2, 2), "feddyn": (1, 1), "fedadmm": (1, 1), "fedcm": (2, 1), "fedsam": (1, 1), "mofedsam": (2, 1),
    "fedspeed": (1, 1), "fedspeed-ing": (2, 1), "fedmim": (3, 1), "localadam": (1, 1), "fadamet": (2, 1),
    "fadamgt": (2, 1), "fedlada": (3, 2), "mimesvrg": (3, 2), "losac": (2, 2), "fedsaga": (1, 1),
    "losac-prox": (2, 2), "scaffold-prox": (2, 2), "fednova": (1, 1), "fedavgm": (1, 1), "fedexp": (1, 1),
    "fedsmoo": (2, 2), "fedgamma": (2, 2), "fedpaq": (1, 1),
}  # fmt: skip
# The server-mirror protocol sends each client its dual: +1 down (docs/algorithms/index.md). FAdamET/GT's uplink depends
# on the tracking subset: checked in tests/test_adaptive_family.py.
COMMUNICATION = {**{k: v for k, v in SUMMARY_TABLE.items() if not costs.tracking_up(k)},
                 "feddyn/server": (2, 1), "fedspeed/server": (2, 1)}  # fmt: skip


def test_registry_declares_the_summary_table_communication():
    assert {name: costs.vectors(name) for name in ALGORITHMS.built_in} == SUMMARY_TABLE


@pytest.mark.parametrize("name", list(COMMUNICATION))
def test_communication_counters_match_the_summary_table(name):
    algorithm, _, storage = name.partition("/")
    rows = Rows()
    cfg = {**SMALL, "algorithm": algorithm, "num-server-rounds": 2, "dual-storage": storage or "client"}
    strategy = run_inprocess(cfg, observers=[rows])
    down, up = COMMUNICATION[name]
    trained = [r for r in rows.rows if r["round"] > 0]
    assert [r["vectors_down_per_client"] for r in trained] == [down, down]
    assert [r["vectors_up_per_client"] for r in trained] == [up, up]
    config = resolve(cfg)
    if config.compression.on:  # a quantized baseline (FedPAQ): each vector up as its compressor's bytes
        from fedsuite.compression.registry import CompressionSettings, build_compressor

        group = config.compression
        compressor = build_compressor(CompressionSettings(group.uplink, group.k, group.levels))
        assert trained[0]["bytes_up_per_client"] == up * compressor.encoded_bytes(strategy.dim)
    else:
        assert trained[0]["bytes_up_per_client"] == up * strategy.dim * 4


def test_scaffold_option_one_stores_the_full_local_gradient_at_the_round_start():
    cfg = {**SMALL, "algorithm": "scaffold", "scaffold-option": 1, "num-server-rounds": 1, "weight-decay": 0.01,
           "sampling": "fixed", "clients-per-round": 8}  # fmt: skip
    strategy = run_inprocess(cfg, keep_client_state=True)
    c_i = [stored(strategy, pid, "c_i") for pid in range(cfg["num-clients"])]
    remove_client_state(strategy)
    fed_cfg = resolve(cfg)
    fed = load_dataset(fed_cfg)
    x0 = strategy.plan.initial_x.astype(np.float64)
    for pid in range(cfg["num-clients"]):
        a, b = fed.features_x[fed.client_parts[pid]], fed.targets[fed.client_parts[pid]]
        expected = a.T @ (a @ x0 - b) / len(b) + 0.01 * x0
        np.testing.assert_allclose(c_i[pid], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(strategy.rule.c, np.mean(c_i, 0), atol=1e-6)


def test_a_confirmed_writes_previous_vectors_are_deleted_without_being_read(tmp_path, monkeypatch):
    """DiskStore reads a member of the partition's file when it is asked for: settling a write the server accepted
    drops the previous copy unread, and the next save still holds every vector it should."""

    from fedsuite.state.store import PREVIOUS, WRITE_ROUND, ClientState, settle

    first = ClientState(DiskStore(tmp_path, 3), 4)
    first.set("c_i", torch.ones(4))
    first.save(1)
    second = ClientState(DiskStore(tmp_path, 3), 4)
    second.accepted_round = 1
    second.set("c_i", torch.full((4,), 2.0))
    second.save(2)  # the file now holds c_i, prev:c_i and the write's round
    read: list[str] = []
    real_read = state_module.read_member

    def counting(path, index, key):
        read.append(key)
        return real_read(path, index, key)

    monkeypatch.setattr(file_tier, "read_member", counting)
    store = DiskStore(tmp_path, 3)
    settle(store, 2)
    assert PREVIOUS + "c_i" not in store and PREVIOUS + "c_i" not in read and WRITE_ROUND in read
    store.flush()
    monkeypatch.setattr(file_tier, "read_member", real_read)
    np.testing.assert_array_equal(DiskStore(tmp_path, 3)["c_i"], np.full(4, 2.0, np.float32))


# ---- previous vectors kept in the file that held them --------------------------------------------------------------
def two_writes(root, accepted_first: bool = True):
    """c_i = 1 written in round 1, then c_i = 2 in round 2 (after the server accepted round 1, or not)."""
    first = ClientState(DiskStore(root, 3), 4)
    first.accepted_round = 0
    first.set("c_i", torch.ones(4))
    first.save(1)
    second = ClientState(DiskStore(root, 3), 4)
    second.accepted_round = 1 if accepted_first else 0
    second.set("c_i", second.get("c_i") + 1)
    second.save(2)
    return second


def test_a_write_links_to_the_file_that_holds_its_previous_vectors_instead_of_copying_them(tmp_path):
    two_writes(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("owner"))
    assert names == ["partition-000003.state", "previous-000003-a.state"]
    index = state_module.read_index(tmp_path / "partition-000003.state")
    assert set(index.members) == {"c_i", "write-round"} and index.links == {
        "prev:c_i": ("previous-000003-a.state", "c_i")
    }
    assert read_arrays(tmp_path / "partition-000003.state")["prev:c_i"].tolist() == [1.0] * 4
    assert [p.name for p in state_files(tmp_path)] == names  # checkpoints copy both
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 2)["c_i"], np.full(4, 2.0))
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 1)["c_i"], np.full(4, 1.0))


@pytest.mark.parametrize("accepted", [2, 1])  # the server accepted the round-2 write, or not
def test_the_next_fit_settles_the_link_and_the_previous_file_goes(tmp_path, accepted):
    two_writes(tmp_path)
    third = ClientState(DiskStore(tmp_path, 3), 4)
    third.accepted_round = accepted
    value = third.get("c_i").clone()
    assert value.tolist() == [2.0 if accepted == 2 else 1.0] * 4  # kept, or undone from the previous file
    third.set("c_i", value + 10)
    third.save(3)
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("owner"))
    linked = ["previous-000003-b.state"] if accepted == 2 else []  # an undone value is in memory: copied
    assert names == ["partition-000003.state", *linked]
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 2)["c_i"], value.numpy())  # round 3 undone
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 3)["c_i"], value.numpy() + 10)


def test_a_write_cut_short_leaves_the_state_it_replaced(tmp_path, monkeypatch):
    two_writes(tmp_path)
    before = {k: v.copy() for k, v in effective(DiskStore(tmp_path, 3), 1).items()}
    third = ClientState(DiskStore(tmp_path, 3), 4)
    third.accepted_round = 2
    third.set("c_i", third.get("c_i") + 10)
    real_replace = os.replace

    def failing(src, dst):
        if str(dst).endswith("partition-000003.state"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(file_tier.os, "replace", failing)
    with pytest.raises(OSError):
        third.save(3)
    monkeypatch.setattr(file_tier.os, "replace", real_replace)
    after = effective(DiskStore(tmp_path, 3), 1)  # the round-2 write, undone: still the state of round 1
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_link_to_a_file_outside_the_folder_is_refused(tmp_path):
    header = json.dumps({"members": [], "links": [{"name": "prev:c_i", "file": "../previous-000003-a.state",
                                                   "member": "c_i"}], "end": 0}).encode()  # fmt: skip
    crafted(tmp_path / "partition-000003.state", header, 0)
    with pytest.raises(StateFileError, match="link 'prev:c_i' does not fit its header"):
        DiskStore(tmp_path, 3)["prev:c_i"]


def test_a_file_system_without_hard_links_gets_copies(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(file_tier.os, "link", no_links)
    two_writes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("owner")) == ["partition-000003.state"]
    index = state_module.read_index(tmp_path / "partition-000003.state")
    assert "prev:c_i" in index.members and not index.links
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 1)["c_i"], np.full(4, 1.0))


def kept_and_partition_files(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("owner"))


def test_the_kept_names_alternate_and_a_crash_leftover_goes_with_the_next_write(tmp_path):
    two_writes(tmp_path)
    store = DiskStore(tmp_path, 3)
    state = ClientState(store, 4)
    for server_round in (3, 4):  # one store object, two writes: the second links to the file the first wrote
        state.accepted_round = server_round - 1
        state._reconciled = False
        state.set("c_i", state.get("c_i") + 1)
        state.save(server_round)
        kept = f"previous-000003-{'b' if server_round == 3 else 'a'}.state"
        assert kept_and_partition_files(tmp_path) == ["partition-000003.state", kept]
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 3)["c_i"], np.full(4, 3.0))
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 4)["c_i"], np.full(4, 4.0))
    (tmp_path / "previous-000003-b.state").write_bytes(b"a crash's leftover")
    state.accepted_round, state._reconciled = 4, False
    state.set("c_i", state.get("c_i") + 1)
    state.save(5)  # links to b (the leftover replaced), and a goes
    assert kept_and_partition_files(tmp_path) == ["partition-000003.state", "previous-000003-b.state"]
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 4)["c_i"], np.full(4, 4.0))


def test_partitions_past_a_million_keep_their_previous_vectors_too(tmp_path):
    for server_round in (1, 2):
        state = ClientState(DiskStore(tmp_path, 1_234_567), 4)
        state.accepted_round = server_round - 1
        state.set("c_i", torch.full((4,), float(server_round)))
        state.save(server_round)
    assert kept_and_partition_files(tmp_path) == ["partition-1234567.state", "previous-1234567-a.state"]
    np.testing.assert_array_equal(effective(DiskStore(tmp_path, 1_234_567), 1)["c_i"], np.ones(4))


def test_a_failed_write_leaves_no_kept_file_behind(tmp_path, monkeypatch):
    two_writes(tmp_path)
    third = ClientState(DiskStore(tmp_path, 3), 4)
    third.accepted_round = 2
    third.set("c_i", third.get("c_i") + 10)
    monkeypatch.setattr(file_tier, "write_state_file", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        third.save(3)
    assert kept_and_partition_files(tmp_path) == ["partition-000003.state", "previous-000003-a.state"]


@pytest.mark.parametrize("held", [True, False])
def test_a_file_replaced_between_load_and_write(tmp_path, held):
    """Another writer replaced the file: previous vectors still in memory are copied; others cannot be kept."""
    two_writes(tmp_path)
    store = DiskStore(tmp_path, 3)
    state = ClientState(store, 4)
    state.accepted_round = 2
    value = state.get("c_i") if held else torch.full((4,), 7.0)  # read (held in memory) or never read
    assert state.has("c_i")  # the file indexed either way
    other = DiskStore(tmp_path, 3)
    other["c_i"] = np.full(4, 99.0, np.float32)
    other.flush()
    state.set("c_i", value + 1)
    if held:
        state.save(3)
        np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 2)["c_i"], np.full(4, 2.0))
        np.testing.assert_array_equal(effective(DiskStore(tmp_path, 3), 3)["c_i"], np.full(4, 3.0))
    else:
        with pytest.raises(StateFileError, match="changed while it was read"):
            state.save(3)


def test_a_missing_kept_file_is_named(tmp_path):
    two_writes(tmp_path)
    (tmp_path / "previous-000003-a.state").unlink()
    with pytest.raises(StateFileError, match=r"partition-000003\.state is corrupt: its 'prev:c_i' is kept in .*"
                                             r"previous-000003-a\.state, which does not hold it"):  # fmt: skip
        effective(DiskStore(tmp_path, 3), 1)
