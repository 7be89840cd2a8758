"""The client-state tiers behind one interface (fedsuite.state.tier, docs/running/scale.md#tiers): each keeps arrays
bit for bit, a flush cut short leaves the state before it, a place holds one run's state only, the same operations
give the same `effective` state in every tier, and the run's StatePlan chooses the tier."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsuite.config.run_config import resolve
from fedsuite.config.schema import ConfigError
from fedsuite.state import device_tier, file_tier, memory_tier
from fedsuite.state.client_state import ClientState
from fedsuite.state.device_tier import DeviceTier
from fedsuite.state.file_tier import FileTier
from fedsuite.state.folders import StateFolderTaken
from fedsuite.state.memory_tier import MemoryTier
from fedsuite.state.plan import TIERS, StatePlan, client_specs, state_plan
from fedsuite.state.tier import WRITE_ROUND, StateTier, effective

ARRAYS = {
    "c_i": np.linspace(-1, 1, 7, dtype=np.float32),
    "table": np.arange(12, dtype=np.float64).reshape(3, 4) / 7,
    "steps": np.array([3, -(2**40)], np.int64),
    "mask": np.array([True, False, True]),
    "scalar": np.array(2.5, np.float32),  # 0-d stays 0-d
    "empty": np.zeros(0, np.float32),
    "strided": np.arange(10, dtype=np.float32)[::3],  # not contiguous: stored as its values
    "big_endian": np.array([1.5, -0.25], ">f4"),
}


@pytest.fixture(params=sorted(TIERS))
def tier(request, tmp_path):
    """Each tier that exists, with its place (a folder; the memory and device tiers' shelf, forgotten after the
    test)."""
    yield TIERS[request.param]
    memory_tier.release(tmp_path)


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def contents(store) -> dict[str, np.ndarray]:
    return {key: np.asarray(store[key]) for key in sorted(store)}


def test_every_tier_is_a_state_tier_and_only_existing_tiers_are_named():
    assert set(TIERS) == {"files", "memory", "device"}
    assert all(issubclass(cls, StateTier) and cls.name == name for name, cls in TIERS.items())


def test_each_tier_round_trips_arrays_bit_for_bit(tier, tmp_path):
    store = tier(tmp_path, 3)
    for name, value in ARRAYS.items():
        store[name] = value
    store.flush()
    again = tier(tmp_path, 3)
    assert sorted(again) == sorted(ARRAYS) and len(again) == len(ARRAYS)
    for name, value in ARRAYS.items():
        assert name in again and same(again[name], np.ascontiguousarray(value) if value.ndim else value), name
    assert tier(tmp_path, 4).keys() == set()  # another partition: nothing


def test_what_a_later_store_reads_is_what_was_flushed(tier, tmp_path):
    value = np.ones(4, np.float32)
    store = tier(tmp_path, 0)
    store["c_i"] = value
    store.flush()
    value += 5  # the caller's array changes after the flush (a tensor's numpy view does)
    assert same(tier(tmp_path, 0)["c_i"], np.ones(4, np.float32))


def test_a_non_numeric_array_is_refused(tier, tmp_path):
    store = tier(tmp_path, 0)
    store["names"] = np.array(["a", "b"])
    with pytest.raises(TypeError, match="only numeric arrays"):
        store.flush()


def crash_on_second_array(tier, monkeypatch):
    """Make the tier's write fail after part of it is done: the file tier's after the first member's bytes, the
    memory and device tiers' after the first value is copied."""
    if tier is FileTier:
        real = file_tier.write_state_file

        def cut_short(f, values, links=None):
            real(f, dict(list(values.items())[:1]), links)  # some bytes reach the temporary file
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(file_tier, "write_state_file", cut_short)
    else:  # the memory tier copies arrays, the device tier tensors (and its small numpy entries as arrays)
        calls = []

        def cut_short_by(real):
            def cut_short(name, value):
                calls.append(name)
                if len(calls) > 1:
                    raise MemoryError("no room")
                return real(name, value)

            return cut_short

        monkeypatch.setattr(memory_tier, "frozen_copy", cut_short_by(memory_tier.frozen_copy))
        monkeypatch.setattr(device_tier, "frozen_tensor", cut_short_by(device_tier.frozen_tensor))


def test_a_flush_cut_short_leaves_the_state_before_it(tier, tmp_path, monkeypatch):
    first = ClientState(tier(tmp_path, 2), 4)
    first.set("c_i", torch.ones(4))
    first.set("m_i", torch.full((4,), 2.0))
    first.save(1)
    before = contents(tier(tmp_path, 2))
    crash_on_second_array(tier, monkeypatch)
    second = ClientState(tier(tmp_path, 2), 4)
    second.accepted_round = 1
    second.set("c_i", torch.full((4,), 7.0))
    second.set("m_i", torch.full((4,), 8.0))
    with pytest.raises((OSError, MemoryError)):
        second.save(2)
    monkeypatch.undo()
    after = contents(tier(tmp_path, 2))
    assert after.keys() == before.keys() and all(same(after[k], before[k]) for k in before)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_a_place_holds_one_runs_state(tier, tmp_path):
    tier.check_owner(tmp_path, None)  # empty, no owner: any run, even one whose key is not known yet
    store = tier(tmp_path, 0, owner_key="run-a")
    store["c_i"] = np.ones(3, np.float32)
    store.flush()  # claims the place before its first write
    tier.check_owner(tmp_path, "run-a")
    with pytest.raises(StateFolderTaken, match="another run"):
        tier.check_owner(tmp_path, "run-b")
    with pytest.raises(StateFolderTaken, match="another run"):
        tier.claim(tmp_path, "run-b")


def test_state_without_an_owner_is_refused(tier, tmp_path):
    store = tier(tmp_path, 0)  # written with no owner key: state of an unknown run
    store["c_i"] = np.ones(3, np.float32)
    store.flush()
    with pytest.raises(StateFolderTaken, match="unknown run"):
        tier.check_owner(tmp_path, "run-a")
    claiming = tier(tmp_path, 1, owner_key="run-a")  # a run's first write claims the place: refused here
    claiming["c_i"] = np.zeros(3, np.float32)
    with pytest.raises(StateFolderTaken, match="unknown run"):
        claiming.flush()
    assert tier(tmp_path, 1).keys() == set()  # the refused write left nothing


def scripted_client(store_of, steps=8, dim=4) -> list[dict[str, np.ndarray]]:
    """A client through accepted, rejected and lost replies, with a vector that appears late; after every fit,
    the store's whole contents and its effective state at every round the server may have accepted."""
    accepted, seen = 0, []
    rng = np.random.default_rng(0)
    for server_round in range(1, steps + 1):
        state = ClientState(store_of(), dim, names=["c_i", "late"])
        state.accepted_round = accepted
        state.set("c_i", state.get("c_i") + torch.tensor(rng.normal(size=dim), dtype=torch.float32))
        if server_round >= 3:
            state.set("late", state.get("late") - 1)
        state.save(server_round)
        fresh = store_of()
        seen.append(contents(fresh))
        seen.extend(effective(fresh, r) for r in range(server_round + 1))
        accepted = server_round if server_round % 3 != 2 else accepted  # rounds 2, 5, 8: rejected or lost
    return seen


def test_the_same_operations_give_the_same_state_in_every_tier(tmp_path):
    by_tier = {}
    for name, cls in TIERS.items():
        root = tmp_path / name
        by_tier[name] = scripted_client(lambda cls=cls, root=root: cls(root, 5))
        memory_tier.release(root)
    reference = scripted_client(lambda shared={}: shared)  # a plain dict: the rule with no tier at all
    for name, seen in by_tier.items():
        assert len(seen) == len(reference)
        for got, want in zip(seen, reference, strict=True):
            assert got.keys() == want.keys() and all(same(got[k], want[k]) for k in want), name


def test_a_memory_tier_keeps_previous_vectors_without_a_copy(tmp_path):
    try:
        first = ClientState(MemoryTier(tmp_path, 0), 3)
        first.set("c_i", torch.ones(3))
        first.save(1)
        store = MemoryTier(tmp_path, 0)
        held = store["c_i"]
        assert not held.flags.writeable  # a flushed value cannot change in place
        second = ClientState(store, 3)
        second.accepted_round = 1
        second.set("c_i", torch.full((3,), 2.0))
        second.save(2)
        assert MemoryTier(tmp_path, 0)["prev:c_i"] is held
    finally:
        memory_tier.release(tmp_path)


def test_a_device_tier_keeps_saved_tensors_on_their_device_and_hands_out_copies(tmp_path):
    """What a client saves stays a tensor (no trip to the host); what it reads is its own copy, so changing it in
    place leaves the stored value; the previous vectors of a write are the shelf's own tensors, never copied."""
    try:
        first = ClientState(DeviceTier(tmp_path, 0), 3)
        first.set("c_i", torch.ones(3))
        first.save(1)
        store = DeviceTier(tmp_path, 0)
        held = store["c_i"]
        assert isinstance(held, torch.Tensor) and held.device == torch.device("cpu")
        assert isinstance(store["write-round"], np.ndarray)  # small entries stay numpy arrays
        second = ClientState(store, 3)
        second.accepted_round = 1
        read = second.get("c_i")
        read.add_(5)  # a client's rule changes what it read in place
        assert torch.equal(DeviceTier(tmp_path, 0)["c_i"], torch.ones(3))
        second.set("c_i", torch.full((3,), 2.0))
        second.save(2)
        again = DeviceTier(tmp_path, 0)
        assert again["prev:c_i"] is held and torch.equal(again["c_i"], torch.full((3,), 2.0))
        third = ClientState(again, 3)
        third.accepted_round = 1  # round 2's reply was rejected: the client trains from round 1's vector
        assert torch.equal(third.get("c_i"), torch.ones(3))
    finally:
        memory_tier.release(tmp_path)


# ---- the plan chooses the tier -----------------------------------------------------------------------------------
def plan_of(settings, one_process=False) -> StatePlan:
    return state_plan(resolve({"algorithm": "scaffold", "num-clients": 10, **settings}), 100, 0, one_process)


def test_the_plan_chooses_the_tier():
    assert plan_of({}).tier() == "files"  # memory state in a RAM folder every process reads
    assert plan_of({"client-state": "disk"}).tier() == "files"
    assert plan_of({}, one_process=True).tier() == "memory"
    assert plan_of({"client-state": "disk"}, one_process=True).tier() == "files"
    assert plan_of({"checkpoint-every": 1}, one_process=True).tier() == "files"  # checkpoints copy state files
    assert plan_of({"algorithm": "fedavg"}).tier() is None


def test_the_plan_puts_state_that_fits_on_the_accelerator(monkeypatch):
    """client-state='auto' in one process on a CUDA card: the device tier while the state fits its share of the
    card, whatever the host's budget says; else the host tiers behind it. Off an accelerator nothing changes."""
    from dataclasses import replace

    from fedsuite.state import plan as plans

    card = 80 * 2**30
    small = replace(plan_of({}, one_process=True), device_bytes=card)  # 10 × 100 floats
    assert small.tier() == "device"
    assert plan_of({}, one_process=True).tier() == "memory"  # no accelerator (device_bytes 0)
    assert replace(plan_of({}), device_bytes=card).tier() == "files"  # not one process
    assert replace(small, mode="memory").tier() == "memory"  # host memory asked for
    state = small.num_clients * small.dim * small.vectors * 4 * 2
    assert replace(small, device_bytes=int(state / plans.DEVICE_SHARE) - 1).tier() == "memory"  # over its share
    over_budget = replace(small, budget_mb=(state - 1) / 2**20)
    assert over_budget.tier() == "device"  # the budget bounds the host's memory, not the card's
    assert replace(over_budget, device_bytes=0).tier() == "files"  # off the card: over the budget, disk as before
    over_both = replace(over_budget, device_bytes=int(state / plans.DEVICE_SHARE) - 1)
    assert over_both.tier() == "files"  # over the card's share and the host's budget: files


def test_state_on_the_device_is_described_and_sized_as_the_cards():
    from dataclasses import replace

    card = replace(plan_of({}, one_process=True), device_bytes=80 * 2**30)
    assert "on the training device" in card.describe() and "of the card's 81,920 MiB" in card.describe()
    assert card.capacity() is None
    small_card = replace(card, mode="device", device_bytes=1000)  # 10 clients × 100 × 4 B × 2 = 8000 B
    assert small_card.capacity()[0] == "error" and "client-state='auto' or 'disk'" in small_card.capacity()[1]
    assert "/dev/shm" not in replace(plan_of({}), mode="device").describe()  # asked for: said so before the run
    assert "on the training device" not in plan_of({}).describe()  # host memory, as before


def test_client_state_device_needs_one_process():
    from dataclasses import replace

    forced = replace(plan_of({}), mode="device")
    with pytest.raises(ConfigError, match="client-state='device'.*in-process engine"):
        forced.tier()
    assert replace(forced, one_process=True).tier() == "device"  # any training device, the CPU included
    assert replace(forced, one_process=True).backend == "memory"  # sized and named as memory state


def test_the_plan_opens_its_tier(tmp_path):
    assert isinstance(plan_of({}).open_store(tmp_path, 1, owner_key="k"), FileTier)
    store = plan_of({}, one_process=True).open_store(tmp_path, 1, owner_key="k")
    assert isinstance(store, MemoryTier) and store.owner_key == "k"


def test_the_specs_come_from_one_place():
    """The plan's specs are the algorithm's declaration and the model's own, as the client rule gets them."""
    from fedsuite.registry import known

    cfg = resolve({"algorithm": "scaffold", "buffers": "local", "relaxed-init": 0.5})
    client = known.load_class(known.ALGORITHMS["scaffold"].client)
    names = [spec.name for spec in client_specs(cfg)]
    assert names == ["c_i", "buffers", "x_last"]
    assert client_specs(cfg, client) == client_specs(cfg) == state_plan(cfg, 10, 2).specs


# ---- the memory tier in a whole in-process run -------------------------------------------------------------------
def final_client_state(tier, strategy) -> dict[int, dict[str, np.ndarray]]:
    """Every client's state as it will train next, read from `tier` at the run's client-state place."""
    root, accepted = strategy.plan.client_state_root, strategy.accepted
    return {pid: effective(tier(root, pid), accepted.get(pid, 0)) for pid in range(strategy.plan.sampler.num_clients)}


@pytest.mark.parametrize("settings", [{"algorithm": "scaffold"}, {"algorithm": "feddyn", "batch-clients": True}])
def test_a_run_with_its_state_in_process_memory_equals_the_run_with_state_files(settings):
    """The in-process engine keeps memory state in the process (the memory tier: the plan is told the federation
    runs in one process); kept for inspection, the same run's state goes to files. Both give the same model after
    every round and the same client state at the end, and the memory run leaves nothing behind."""
    from fedsuite import testing as kit
    from fedsuite.run.inprocess import remove_client_state, run_inprocess
    from fedsuite.server.observers import RoundObserver

    cfg = {**kit.PARTIAL, **settings}
    files = kit.run_algorithm(cfg["algorithm"], cfg, keep_client_state=True, run_id=4101)
    in_files = final_client_state(FileTier, files.strategy)
    remove_client_state(files.strategy)

    class AtTheEnd(RoundObserver):
        models, seen = [], {}

        def aggregated(self, server_round, strategy, x_before, replies):
            self.models.append(np.array(strategy.x, copy=True))
            self.strategy = strategy

        def ended(self, status, reason):  # before the run's client state is removed
            root = self.strategy.plan.client_state_root
            self.seen = {"shelf": memory_tier.holds(root), "files": sorted(p.name for p in root.glob("partition-*")),
                         "state": final_client_state(MemoryTier, self.strategy)}  # fmt: skip

    watch = AtTheEnd()
    strategy = run_inprocess({**kit.LSQ, **cfg}, observers=[watch], run_id=4102)
    assert watch.seen["shelf"] and watch.seen["files"] == []  # held in the process, nothing went to files
    assert not memory_tier.holds(strategy.plan.client_state_root)  # released with the run
    assert len(watch.models) == len(files.rounds)
    assert all(kit.identical(m, r.x) for m, r in zip(watch.models, files.rounds, strict=True))
    assert kit.identical(np.asarray(strategy.x, dtype=np.float32), files.x) and any(in_files.values())
    assert kit.identical(watch.seen["state"], in_files)


@pytest.mark.parametrize("settings", [{"algorithm": "scaffold"}, {"algorithm": "feddyn", "batch-clients": True}])
def test_a_run_with_its_state_and_replies_on_the_device_equals_the_run_with_state_files(settings, monkeypatch):
    """client-state='device' keeps every client's vectors as tensors on the training device (here the CPU), and
    batched replies stay there too (fedsuite/batched/device_replies.py): the same models after every round and the
    same client state at the end as the run whose state goes to files and whose replies travel as arrays."""
    from fedsuite import testing as kit
    from fedsuite.batched import device_replies
    from fedsuite.run.inprocess import remove_client_state, run_inprocess
    from fedsuite.server.observers import RoundObserver

    cfg = {**kit.PARTIAL, **settings}
    files = kit.run_algorithm(cfg["algorithm"], cfg, keep_client_state=True, run_id=4103)
    in_files = final_client_state(FileTier, files.strategy)
    remove_client_state(files.strategy)
    monkeypatch.setattr(device_replies, "ON_CPU", True)

    class AtTheEnd(RoundObserver):
        models, kinds = [], set()

        def aggregated(self, server_round, strategy, x_before, replies):
            self.models.append(np.array(strategy.x, copy=True))
            self.strategy = strategy

        def ended(self, status, reason):  # before the run's client state is removed
            root = self.strategy.plan.client_state_root
            held = memory_tier.shelf(root).partitions
            vectors = [v for arrays in held.values() for k, v in arrays.items() if ":" not in k and k != WRITE_ROUND]
            self.kinds = {type(v).__name__ for v in vectors}
            self.state = final_client_state(DeviceTier, self.strategy)

    watch = AtTheEnd()
    strategy = run_inprocess({**kit.LSQ, **cfg, "client-state": "device"}, observers=[watch], run_id=4104)
    assert watch.kinds == {"Tensor"}  # the vectors were held as tensors, not host arrays
    assert not memory_tier.holds(strategy.plan.client_state_root)  # released with the run
    assert all(kit.identical(m, r.x) for m, r in zip(watch.models, files.rounds, strict=True))
    assert kit.identical(np.asarray(strategy.x, dtype=np.float32), files.x) and any(in_files.values())
    assert kit.identical(watch.state, in_files)


def test_client_state_device_is_refused_where_it_cannot_live():
    with pytest.raises(ConfigError, match="client-state='device'.*checkpoint"):
        resolve({"client-state": "device", "checkpoint-every": 2})
    from simulation.launcher.launch import run

    with pytest.raises(ConfigError, match="client-state='device'.*in-process engine"):
        run({"client-state": "device", "algorithm": "scaffold"}, quiet=True, check_data=False)
