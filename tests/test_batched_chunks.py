"""Large cohorts in chunks (batch-chunk, fedsuite/batched/chunks.py, docs/running/batched.md#large-cohorts-chunks): a
group trained in even chunks, one stacked computation each, equals the group trained as one and the clients trained
one at a time, model and per-client state; a chunk whose stacked training raises trains one at a time and the other
chunks stay stacked; the plan's even split and its CUDA arithmetic (bytes per client, free bytes → chunk size),
measured once per run and kind of group; the probe's step leaves the client it copies untouched; bad batch-chunk
values are refused before any training.

The runs build their model in float64 (tests/test_batched_clients.py's `double_linear`). Each row of a stacked
computation is the same arithmetic whatever the number of rows, so a chunk's clients can differ from the whole
group's only by float64 rounding (a kernel may block its work differently for another C); the wire between server
and clients is float32, so the final models compare within TOLERANCE_FLOAT64 (in practice they come out equal).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedsuite import testing as kit
from fedsuite.batched import chunks, dispatch
from fedsuite.batched.chunks import Footprint, GroupSample, MemoryPlan, even_chunks, footprint, most_clients, one_step
from fedsuite.batched.model import StackedModel
from fedsuite.batched.private import probe_oracle
from fedsuite.config.run_config import resolve
from fedsuite.config.schema import ConfigError
from fedsuite.local.adaptive import AdamStep
from fedsuite.local.loop import AddVector, LocalData, LocalSettings, SharpnessAware, UpdateRule
from fedsuite.models.networks import FlatModel
from tests.test_batched_clients import DOUBLE, TOLERANCE_FLOAT64

SEVEN = {**DOUBLE, "num-clients": 7, "clients-per-round": 7}
GIB = 2**30


@pytest.fixture
def chunks_trained(monkeypatch):
    """The dispatcher's `stacked` (the chunk sizes it trained stacked) after every round, in order."""
    seen: list[list[int]] = []
    real = dispatch.BatchedDispatcher.train

    def recording(self, members):
        replies = real(self, members)
        seen.append(list(self.stacked))
        return replies

    monkeypatch.setattr(dispatch.BatchedDispatcher, "train", recording)
    return seen


def _gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _run(name: str, config: dict, state: str | None = None) -> tuple[kit.KitRun, list[np.ndarray]]:
    """The run, and after every round each client's declared state `state` (rows by partition; none if None)."""
    states: list[np.ndarray] = []

    def held(strategy) -> None:
        states.append(np.stack([kit.client_vector(strategy, pid, state) for pid in range(config["num-clients"])]))

    return kit.run_algorithm(name, config, invariants=[held] if state else []), states


@pytest.mark.parametrize(("name", "state"), [("scaffold", "c_i"), ("fedsaga", None), ("fadamgt", None)])
def test_chunks_equal_one_group_and_one_at_a_time(name, state, chunks_trained, caplog):
    # SCAFFOLD: per-client state c_i; FedSaga: a block table stacked per chunk; FAdamGT: a gradient sum written back
    alone, alone_states = _run(name, SEVEN, state)
    whole, whole_states = _run(name, {**SEVEN, "batch-clients": True}, state)
    assert chunks_trained == [[7], [7]]
    chunks_trained.clear()
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        chunked, chunked_states = _run(name, {**SEVEN, "batch-clients": True, "batch-chunk": 3}, state)
    assert chunks_trained == [[3, 2, 2], [3, 2, 2]]  # every round in three stacked chunks, none fell back
    said = [r.getMessage() for r in caplog.records if "batch-chunk:" in r.getMessage()]
    assert said == ["fedsuite │ batch-chunk: a group of 7 clients trains in chunks of [3, 2, 2]: batch-chunk=3"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "batch-clients" in r.getMessage()]
    for a, b, c in zip(alone.rounds, whole.rounds, chunked.rounds, strict=True):
        assert _gap(b.x, c.x) <= TOLERANCE_FLOAT64 and _gap(a.x, c.x) <= TOLERANCE_FLOAT64, f"round {a.round}"
        assert a.row["rejected"] == c.row["rejected"] == 0
        assert c.row["train_loss"] == pytest.approx(b.row["train_loss"], rel=1e-9)
    assert len(chunked_states) == (2 if state else 0)
    for a, b, c in zip(alone_states, whole_states, chunked_states, strict=True):
        assert _gap(b, c) <= TOLERANCE_FLOAT64 and _gap(a, c) <= TOLERANCE_FLOAT64
        assert np.abs(c).max() > 0  # the state was written, so the comparison says something


def test_a_chunk_of_one_trains_alone_and_one_per_chunk_is_one_at_a_time(chunks_trained):
    alone = kit.run_algorithm("scaffold", SEVEN)
    four_three = kit.run_algorithm("scaffold", {**SEVEN, "batch-clients": True, "batch-chunk": 6})
    assert chunks_trained == [[4, 3], [4, 3]]  # even: not 6 and 1
    assert _gap(alone.x, four_three.x) <= TOLERANCE_FLOAT64
    chunks_trained.clear()
    single = kit.run_algorithm("scaffold", {**SEVEN, "batch-clients": True, "batch-chunk": 1})
    assert chunks_trained == [[], []]
    assert kit.identical(alone.x, single.x)


def test_a_chunk_whose_stacked_training_raises_trains_one_at_a_time(monkeypatch, chunks_trained, caplog):
    real = StackedModel.loss_and_grad

    def broken(self, *args):  # only the chunks of three clients fail
        if self.x.shape[0] == 3:
            raise RuntimeError("no room on the card")
        return real(self, *args)

    monkeypatch.setattr(StackedModel, "loss_and_grad", broken)
    alone, alone_states = _run("scaffold", SEVEN, "c_i")
    with caplog.at_level(logging.WARNING, logger="flwr.fedsuite"):
        chunked, chunked_states = _run("scaffold", {**SEVEN, "batch-clients": True, "batch-chunk": 3}, "c_i")
    said = [r.getMessage() for r in caplog.records if "batch-clients" in r.getMessage()]
    assert len(said) == 1 and "raised RuntimeError: no room on the card" in said[0], said
    assert chunks_trained == [[3, 2, 2], [3, 2, 2]]
    assert _gap(alone.x, chunked.x) <= TOLERANCE_FLOAT64
    assert _gap(alone_states[-1], chunked_states[-1]) <= TOLERANCE_FLOAT64


@pytest.mark.parametrize(
    ("clients", "most", "sizes"),
    [(40, 15, [14, 13, 13]), (7, 3, [3, 2, 2]), (7, 10, [7]), (7, 7, [7]), (3, 2, [2, 1]), (5, 1, [1] * 5),
     (100, 33, [25, 25, 25, 25]), (0, 4, [])],
)  # fmt: skip
def test_even_chunks(clients, most, sizes):
    assert even_chunks(clients, most) == sizes


def test_even_chunks_are_the_fewest_and_differ_by_at_most_one():
    for clients in range(1, 60):
        for most in range(1, 62):
            sizes = even_chunks(clients, most)
            assert sum(sizes) == clients and max(sizes) <= most and max(sizes) - min(sizes) <= 1
            assert len(sizes) == -(-clients // most)


def test_the_cuda_arithmetic_bytes_per_client_and_free_bytes_to_chunk_size():
    # one client: 1 GiB held, 1 GiB passing; two: 2 GiB held, 1.5 GiB passing. The second client adds 0.5 GiB passing,
    # half the two clients' is 0.75 GiB: the more is taken (the one-client step may have had a larger workspace)
    assert footprint((GIB, 2 * GIB), (2 * GIB, 3 * GIB + GIB // 2)) == Footprint(GIB, 3 * GIB // 4, GIB // 4)
    # a workspace that grows with the second client: what it adds (1.5 GiB) is more than half of two (1.25 GiB)
    assert footprint((GIB, 2 * GIB), (2 * GIB, 4 * GIB + GIB // 2)) == Footprint(GIB, 3 * GIB // 2, 0)
    assert footprint((100, 150), (200, 240)) == Footprint(100, 20, 30)  # passing: 40 − 50 < 0, half of 40
    assert footprint((0, 0), (0, 0)) == Footprint(0, 0, 0)
    # held 1 GiB, passing 0.5 GiB: each client 1.5 GiB eager, 2 GiB recorded (the recording's own pool), plus draws
    found = Footprint(held=GIB, passing=GIB // 2, fixed=0)
    assert found.client_bytes(recorded=False, draws=0) == 3 * GIB // 2
    assert found.client_bytes(recorded=True, draws=GIB // 4) == 9 * GIB // 4
    assert most_clients(free=20 * GIB, per_client=3 * GIB // 2, fixed=0) == 10  # 0.8 × 20 / 1.5 = 10.67
    assert most_clients(free=20 * GIB, per_client=3 * GIB // 2, fixed=GIB) == 10  # (16 − 1) / 1.5
    assert most_clients(free=20 * GIB, per_client=3 * GIB // 2, fixed=2 * GIB) == 9  # (16 − 2) / 1.5 = 9.33
    assert most_clients(free=GIB, per_client=3 * GIB // 2, fixed=0) == 1  # one client always trains
    assert most_clients(free=10 * GIB, per_client=GIB, fixed=0, fraction=0.5) == 5


def _sample(device_type: str = "cpu") -> GroupSample:
    data = LocalData(torch.randn(12, 3, dtype=torch.float64), torch.randn(12, dtype=torch.float64))
    model = FlatModel(torch.nn.Linear(3, 1, bias=False).double())
    settings = LocalSettings(lr=0.1, steps=5, epochs=1, batch_size=4, weight_decay=0.01, clip_norm=0.5)
    sample = GroupSample(model, torch.zeros(3, dtype=torch.float64), data, _loss, UpdateRule(), settings, 5, 4)
    if device_type != "cpu":  # the plan reads only the device of the model's x
        sample.model = SimpleNamespace(x=SimpleNamespace(device=torch.device(device_type, 0)))
    return sample


def _loss(out, y):
    return 0.5 * torch.nn.functional.mse_loss(out.squeeze(-1), y)


def test_the_cuda_plan_probes_once_per_kind_and_splits_evenly(monkeypatch):
    probes = []

    def probe(sample):
        probes.append(sample)
        return Footprint(held=GIB, passing=GIB // 2, fixed=0)

    monkeypatch.setattr(chunks, "probe", probe)
    monkeypatch.setattr(chunks, "free_bytes", lambda device: 20 * GIB)
    plan = MemoryPlan()
    sample = _sample("cuda")  # 5 steps of the plain rule: recorded, so passing counts twice → 2 GiB a client + draws
    first = plan.plan(40, 0, sample, "kind", cuda_graphs=True)
    assert first.sizes == [7, 7, 7, 7, 6, 6]  # 0.8 × 20 GiB hold 7 clients of 2 GiB and 1280 B: 40 in 6 even chunks
    assert "20.00 GiB free on cuda:0 × 0.8" in first.why and "×2 for the recorded step" in first.why
    eager = plan.plan(40, 0, sample, "kind", cuda_graphs=False)  # 1.5 GiB a client: 10 fit
    assert eager.sizes == [10] * 4 and len(probes) == 1  # the same kind: measured once
    plan.plan(40, 0, sample, "another kind", cuda_graphs=False)
    assert len(probes) == 2
    assert plan.plan(40, 15, sample, "kind", cuda_graphs=True).sizes == [14, 13, 13]  # the key wins, no probe
    assert len(probes) == 2
    # a plan made is kept for the run: a later round trains the same chunks (and replays the steps kept for them,
    # whose memory the free bytes then no longer show)
    monkeypatch.setattr(chunks, "free_bytes", lambda device: 10 * GIB)
    assert plan.plan(40, 0, sample, "kind", cuda_graphs=True).sizes == first.sizes
    assert MemoryPlan().plan(40, 0, sample, "kind", cuda_graphs=True).sizes != first.sizes  # a new run plans anew


def test_a_failing_probe_leaves_the_whole_group(monkeypatch):
    def probe(sample):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(chunks, "probe", probe)
    monkeypatch.setattr(chunks, "free_bytes", lambda device: 20 * GIB)
    found = MemoryPlan().plan(40, 0, _sample("cuda"), "kind", cuda_graphs=True)
    assert found.sizes == [40] and "probe raised RuntimeError: out of memory" in found.why


def test_on_a_cpu_the_plan_is_the_whole_group_while_the_hosts_memory_holds_its_vectors(monkeypatch):
    sample = _sample()
    assert MemoryPlan().plan(40, 0, sample, "kind", cuda_graphs=True).sizes == [40]
    assert MemoryPlan().plan(40, 6, sample, "kind", cuda_graphs=True).sizes == [6, 6, 6, 6, 6, 5, 5]
    per_client = chunks.vector_bytes(sample)
    assert per_client == 3 * 3 * 8 + 2 * 5 * (4 * 3 + 4) * 8  # x, gradient, x0 (d = 3, float64); 5 minibatches, twice
    monkeypatch.setattr(chunks, "available_host_bytes", lambda: 20 * per_client)  # half of it: 10 clients' vectors
    assert MemoryPlan().plan(10, 0, sample, "kind", cuda_graphs=True).sizes == [10]
    split = MemoryPlan().plan(40, 0, sample, "kind", cuda_graphs=True)
    assert split.sizes == [10] * 4 and "more than 0.5 of the" in split.why
    monkeypatch.setattr(chunks, "available_host_bytes", lambda: None)  # not readable: the whole group
    assert MemoryPlan().plan(40, 0, sample, "kind", cuda_graphs=True).sizes == [40]


def test_a_rules_tensors_are_counted_once_per_stage():
    vector, moments = torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    adam = AdamStep(moments, 0.9, 0.99, 1e-8)  # m, v, v̂ and its step's buffer
    shared = AddVector(vector)
    rule = UpdateRule(step=adam, clipped=(shared,), after_step=(shared,))
    assert chunks.rule_bytes(rule) == (4 + 1) * 3 * 8  # Adam's four vectors and the shared one's, d = 3, float64
    assert chunks.rule_bytes(UpdateRule()) == 0


def test_the_probes_step_leaves_the_client_it_copies_untouched():
    sample = _sample()
    vector, moments = torch.ones(3, dtype=torch.float64), torch.full((3,), 0.1, dtype=torch.float64)
    sample.rule = UpdateRule(point=SharpnessAware(0.05), clipped=(AddVector(vector),),
                             step=AdamStep(moments.clone(), 0.9, 0.99, 1e-8))  # fmt: skip
    before = {name: getattr(sample.rule.step, name).clone() for name in ("m", "v", "vhat")}
    inputs, targets = (torch.stack([t] * 2) for t in sample.minibatch())
    model, x0, stacked, ctx = one_step(sample, 2, inputs, targets)
    assert model.x.shape == (2, 3) and x0.shape == (2, 3)
    assert not torch.equal(model.x, x0)  # it stepped
    assert float(stacked.rule.step.m.abs().max()) > 0  # the stacked moments moved, the client's did not
    for name, value in before.items():
        assert torch.equal(getattr(sample.rule.step, name), value), name
    assert torch.equal(sample.x0, torch.zeros(3, dtype=torch.float64)) and torch.equal(vector, torch.ones(3))
    assert sample.draws_bytes() == 2 * 5 * (4 * 3 + 4) * 8  # K_i minibatches of 4 samples (3 features, a target)
    sample.settings = LocalSettings(lr=0.1, steps=0, epochs=1, batch_size=4, weight_decay=0.0, clip_norm=0.0)
    assert sample.draws_bytes() == 2 * (4 * 3 + 4) * 8  # epoch mode: drawn one step at a time


@pytest.mark.parametrize(("value", "error"), [(-1, "batch-chunk=-1: must be >= 0"),
                                              (2.5, "batch-chunk=2.5: expected an integer"),
                                              ("all", "batch-chunk='all': expected an integer")])  # fmt: skip
def test_bad_batch_chunk_values_are_refused(value, error):
    with pytest.raises(ConfigError) as refused:
        resolve({"batch-chunk": value})
    assert error in str(refused.value).splitlines()[-1]
    assert resolve({"batch-chunk": 4}).batching.chunk == 4 and resolve({}).batching.chunk == 0


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ON_CUDA = {**SEVEN, "device": "cuda", "batch-clients": True}


@needs_cuda
def test_the_probe_on_a_cuda_device_counts_each_clients_vectors_and_activations():
    data = LocalData(torch.randn(64, 3, 16, 16, device="cuda"), torch.randint(0, 10, (64,), device="cuda"))
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                 torch.nn.Linear(32 * 16 * 16, 10))  # fmt: skip
    model = FlatModel(module, device="cuda")
    d = model.x.numel()
    x0 = model.x.detach().clone()
    rule = UpdateRule(clipped=(AddVector(torch.ones(d, device="cuda")),))
    settings = LocalSettings(lr=0.1, steps=5, epochs=1, batch_size=32, weight_decay=0.0, clip_norm=0.0)
    sample = GroupSample(model, x0, data, torch.nn.functional.cross_entropy, rule, settings, 5, 32)
    found = chunks.probe(sample)
    assert found.held >= 4 * (d * 4 - 512)  # x, gradient, x0, the rule's vector: float32 rows (blocks of 512 B)
    assert found.passing >= 32 * 32 * 16 * 16 * 4  # at least the convolution's output for 32 samples
    plan = MemoryPlan().plan(1000, 0, sample, "kind", cuda_graphs=True)
    assert "GiB free on cuda" in plan.why and sum(plan.sizes) == 1000


@needs_cuda
def test_a_cuda_run_measured_by_the_plan_equals_the_whole_group_and_one_at_a_time(monkeypatch, chunks_trained, caplog):
    alone = kit.run_algorithm("scaffold", {**ON_CUDA, "batch-clients": False})
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        measured = kit.run_algorithm("scaffold", ON_CUDA)  # a least-squares model: the whole group fits
    said = [r.getMessage() for r in caplog.records if "batch-chunk:" in r.getMessage()]
    assert len(said) == 1 and "a group of 7 clients trains in chunks of [7]" in said[0] and "GiB free" in said[0]
    assert chunks_trained == [[7], [7]]
    chunks_trained.clear()
    monkeypatch.setattr(chunks, "free_bytes", lambda device: 0)  # no room: one client at a time
    starved = kit.run_algorithm("scaffold", ON_CUDA)
    assert chunks_trained == [[], []]
    assert _gap(alone.x, measured.x) <= TOLERANCE_FLOAT64 and _gap(alone.x, starved.x) <= TOLERANCE_FLOAT64


PRIVATE = {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 0.3, "dp-noise-source": "seeded",
           "model": "tests.test_batched_dp_sgd:double_split_linear"}  # fmt: skip


def test_dp_sgd_clients_that_reach_the_dispatcher_train_in_chunks_with_their_own_ledgers(monkeypatch):
    # DP-SGD clients train stacked once their stage stops asking to train alone (fedsuite/batched/private.py)
    pytest.importorskip("dp_accounting")
    from fedsuite.privacy.dp_sgd import SampleLevelStage

    monkeypatch.setattr(SampleLevelStage, "trains_alone", None)
    calls: list[tuple[int, bool]] = []
    real = dispatch.train_stacked

    def counting(*args, **kwargs):
        calls.append((len(args[1]), kwargs.get("privates") is not None))
        return real(*args, **kwargs)

    monkeypatch.setattr(dispatch, "train_stacked", counting)
    private = {**SEVEN, **PRIVATE}
    alone = kit.run_algorithm("scaffold", private)
    chunked = kit.run_algorithm("scaffold", {**private, "batch-clients": True, "batch-chunk": 3})
    assert calls == [(3, True), (2, True), (2, True)] * 2  # every chunk stacked, with each client's DpSgd
    assert _gap(alone.x, chunked.x) <= TOLERANCE_FLOAT64 and _gap(alone.x, alone.x0) > 1e-3
    assert [r.row["rejected"] for r in chunked.rounds] == [0, 0]


def test_the_probes_private_step_takes_throwaway_copies_of_the_clients_dp_sgd(monkeypatch):
    from fedsuite.privacy.dp_sgd import DpSgd
    from fedsuite.server.sampling import Sampler

    sample = _sample()
    sample.private = DpSgd(1.0, 0.3, 4, 12, 1e-5, Sampler(4, "fixed", 2), 0, 1, noise_source="seeded")
    made = []
    monkeypatch.setattr(
        chunks, "probe_oracle", lambda model, private: made.append(private) or probe_oracle(model, private)
    )
    inputs, targets = (torch.stack([t] * 2) for t in sample.minibatch())
    model, x0, _, _ = one_step(sample, 2, inputs, targets)
    assert made == [sample.private] and sample.private.releases == []  # the client's own ledger counted nothing
    assert not torch.equal(model.x, x0)


def test_the_probe_reads_the_allocators_counts_around_each_step(monkeypatch):
    # the allocator's counts, faked on a CPU: before and after the 1-client step, then the 2-client step
    allocated = iter([10 * GIB, 11 * GIB, 10 * GIB, 12 * GIB])
    peaks = iter([12 * GIB, 13 * GIB + GIB // 2])
    resets = []
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: next(allocated))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: next(peaks))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", resets.append)
    steps = []
    monkeypatch.setattr(chunks, "one_step", lambda sample, clients, inputs, targets: steps.append(inputs.shape))
    found = chunks.probe(_sample())
    assert steps == [(1, 4, 3), (2, 4, 3)] and len(resets) == 2  # the stacked minibatches of 1 and 2 clients
    # held 1 and 2 GiB, passing 1 and 1.5 GiB: a client holds 1, passes 0.75 (half of two's); 0.25 fixed
    assert found == Footprint(GIB, 3 * GIB // 4, GIB // 4)
