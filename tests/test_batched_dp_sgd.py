"""DP-SGD under cohort batching (dp-sgd=true with batch-clients=true, fedsuite/batched/private.py,
docs/privacy-dp-sgd.md): the stacked private step equals each client's own private step (each record's gradient
clipped, summed, its own noise stream's draws, over B), the pieces a large step is cut into change nothing but
rounding, a failed stacked attempt leaves each client's ledger as it was, and through the engine a batched run equals
the one-at-a-time run (models, each client's ε, the budget's refusal) while it really trains stacked.

The engine runs use dp-noise-source='seeded' so both runs draw the same noise, and a float64 model with two parameter
tensors (`double_split_linear`), so the two differ by float64 rounding only (TOLERANCE_FLOAT64); the default float32
model differs by float32 rounding (TOLERANCE_FLOAT32, relative to the model's size)."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from fedsuite.batched import dispatch
from fedsuite.batched.loop import train_stacked
from fedsuite.batched.model import StackedModel
from fedsuite.batched.private import RECORD_GRADIENT_BYTES, StackedPrivateModel, probe_oracle
from fedsuite.local.loop import LocalData, SharpnessAware, UpdateRule
from fedsuite.models.networks import FlatModel, build_model, loss_function
from fedsuite.privacy import dp_sgd
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.observers import RoundObserver
from fedsuite.server.sampling import Sampler
from fedsuite.testing.kit import PARTIAL

pytest.importorskip("dp_accounting")

TOLERANCE_FLOAT64 = 1e-12
TOLERANCE_FLOAT32 = 1e-6
# 5 clients, 4 a round, batches of 4 of 12 records, 3 steps, 2 rounds, a clip-norm that acts after the private
# gradient, a DP-SGD clip that some records' gradients pass, noise from the run seed.
BASE = {**PARTIAL, "num-clients": 5, "clients-per-round": 4, "synthetic-samples": 12, "batch-size": 4,
        "local-steps": 3, "num-server-rounds": 2, "clip-norm": 0.5}  # fmt: skip
PRIVATE = {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 0.3, "dp-noise-source": "seeded"}
DOUBLE = {**BASE, **PRIVATE, "model": "tests.test_batched_dp_sgd:double_split_linear"}


class _SplitLinear(nn.Module):
    """The synthetic federations' regression head x ↦ ⟨w, x⟩ in float64, its w held as two parameter tensors (the
    first two coordinates and the rest), so a record's gradient norm spans two tensors and the flat x is still w."""

    def __init__(self, features: int):
        super().__init__()
        self.head = nn.Parameter(torch.zeros(2, dtype=torch.float64))
        self.tail = nn.Parameter(torch.zeros(features - 2, dtype=torch.float64))
        nn.init.uniform_(self.head, -0.3, 0.3)
        nn.init.uniform_(self.tail, -0.3, 0.3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        flat = inputs.flatten(1).double()
        return (flat[:, :2] @ self.head + flat[:, 2:] @ self.tail).unsqueeze(1)


def double_split_linear(input_shape, num_classes, task):
    return _SplitLinear(math.prod(input_shape))


class _Replies(RoundObserver):
    """Every round's model and each replying client's metrics, by round and partition."""

    def __init__(self):
        self.models: dict[int, np.ndarray] = {}
        self.metrics: dict[int, dict[int, dict]] = {}

    def replied(self, server_round, replies):
        self.metrics[server_round] = {reply.partition_id: dict(reply.metrics) for reply in replies}

    def aggregated(self, server_round, strategy, x_before, replies):
        self.models[server_round] = np.array(strategy.x, copy=True)


def _run(algorithm: str, config: dict, **options) -> tuple[_Replies, object]:
    seen = _Replies()
    strategy = run_inprocess({**config, "algorithm": algorithm}, observers=[seen], **options)
    return seen, strategy


@pytest.fixture
def stacked_calls(monkeypatch):
    """(group size, whether the group's DP-SGD oracles were handed to the stacked loop) of every stacked group."""
    calls: list[tuple[int, bool]] = []

    def counting(*args, **kwargs):
        privates = kwargs.get("privates")
        calls.append((len(args[1]), privates is not None and all(p is not None for p in privates)))
        return train_stacked(*args, **kwargs)

    monkeypatch.setattr(dispatch, "train_stacked", counting)
    return calls


def _gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _epsilons(seen: _Replies) -> dict[int, dict[int, tuple[float, float]]]:
    keys = (dp_sgd.EPSILON_METRIC, dp_sgd.NEXT_EPSILON_METRIC)
    return {r: {p: tuple(m[k] for k in keys) for p, m in by.items()} for r, by in seen.metrics.items()}


# ---- through the engine ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "fedsam", "fedspeed"])
def test_batched_dp_sgd_equals_one_at_a_time(algorithm, stacked_calls, caplog):
    alone, _ = _run(algorithm, DOUBLE)
    assert not stacked_calls
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched, _ = _run(algorithm, {**DOUBLE, "batch-clients": True})
    assert not [r.getMessage() for r in caplog.records if "batch-clients" in r.getMessage()]
    assert stacked_calls == [(BASE["clients-per-round"], True)] * BASE["num-server-rounds"]
    assert alone.models.keys() == batched.models.keys() == {1, 2}
    for r, x in alone.models.items():
        assert _gap(x, batched.models[r]) <= TOLERANCE_FLOAT64, f"round {r}: {_gap(x, batched.models[r]):.3e}"
    epsilons = _epsilons(alone)
    assert epsilons == _epsilons(batched)  # each client's ε, now and after one more round: exactly equal
    assert all(0 < now < nxt < math.inf for by in epsilons.values() for now, nxt in by.values())
    assert all("loss" not in m for by in batched.metrics.values() for m in by.values())  # no training loss sent


def test_the_float32_model_batched_is_equal_up_to_float32_rounding(stacked_calls):
    config = {**BASE, **PRIVATE}
    alone, _ = _run("fedsam", config)
    batched, _ = _run("fedsam", {**config, "batch-clients": True})
    scale = max(1.0, float(np.abs(alone.models[2]).max()))
    assert _gap(alone.models[2], batched.models[2]) <= TOLERANCE_FLOAT32 * scale
    assert _epsilons(alone) == _epsilons(batched)
    assert stacked_calls and all(private for _, private in stacked_calls)


def test_a_group_whose_stacked_training_raises_trains_alone_with_exact_ledgers(monkeypatch, stacked_calls, caplog):
    """The stacked attempt fails in its second step, after it counted a step in every client's ledger and drew
    noise: the clients then train one at a time, and their models and ε are the one-at-a-time run's."""
    real, calls = StackedPrivateModel.loss_and_grad, []

    def broken(self, *args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("no room on the card")
        return real(self, *args)

    alone, _ = _run("fedavg", DOUBLE)
    monkeypatch.setattr(StackedPrivateModel, "loss_and_grad", broken)
    with caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        batched, _ = _run("fedavg", {**DOUBLE, "batch-clients": True})
    said = [r.getMessage() for r in caplog.records if "batch-clients" in r.getMessage()]
    assert len(said) == 1 and "raised RuntimeError: no room on the card" in said[0], said
    assert len(stacked_calls) == BASE["num-server-rounds"] and len(calls) > 2  # round 2 trained stacked
    assert _epsilons(alone) == _epsilons(batched)
    for r, x in alone.models.items():
        assert _gap(x, batched.models[r]) <= TOLERANCE_FLOAT64, f"round {r}"


def _any_client(reason: str) -> str:
    return re.sub(r"client \d+", "client N", reason)


def _recorded(tmp_path, name: str, config: dict):
    config = {**config, "algorithm": "fedavg", "out-dir": str(tmp_path), "run-name": name}
    strategy = run_inprocess(config, record=True)
    folder = tmp_path / name
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return strategy, rows, json.loads((folder / "summary.json").read_text())


@pytest.mark.parametrize(("noise", "target", "rounds"), [(0.5, 1.0, 3), (4.0, 4.0, 12)])
def test_the_budget_refusal_is_the_same_batched(tmp_path, stacked_calls, noise, target, rounds):
    """σ_s = 0.5: the first round would pass the target and releases nothing; σ_s = 4: the server stops before the
    round that would take a client past it. Batched, the same rows, the same reason, the same model."""
    config = {**PARTIAL, **PRIVATE, "dp-sgd-noise": noise, "dp-sgd-clip": 1.0, "dp-target-epsilon": target,
              "num-server-rounds": rounds}  # fmt: skip
    alone = _recorded(tmp_path, "alone", config)
    assert not stacked_calls
    batched = _recorded(tmp_path, "batched", {**config, "batch-clients": True})
    assert stacked_calls and all(private for _, private in stacked_calls)
    assert batched[2]["status"] == alone[2]["status"] == "budget-spent"
    # the reason names the first refusal the server heard of: the same words and ε, maybe another client of the cohort
    assert _any_client(batched[2]["reason"]) == _any_client(alone[2]["reason"])
    keys = ("round", "dp_sgd_epsilon")
    assert [{k: r.get(k) for k in keys} for r in batched[1]] == [{k: r.get(k) for k in keys} for r in alone[1]]
    assert np.abs(np.asarray(batched[0].x) - np.asarray(alone[0].x)).max() <= TOLERANCE_FLOAT32


def test_with_secret_noise_two_batched_runs_differ(stacked_calls):
    secret = {**DOUBLE, "dp-noise-source": "secure", "batch-clients": True, "num-server-rounds": 1}
    a, _ = _run("fedavg", secret)
    b, _ = _run("fedavg", secret)
    assert stacked_calls == [(BASE["clients-per-round"], True)] * 2
    assert not np.array_equal(a.models[1], b.models[1])
    assert _epsilons(a) == _epsilons(b)  # the noise differs, the privacy it buys does not


# ---- the stacked private gradient -----------------------------------------------------------------------------
CLIENTS, BATCH, NOISE, CLIP = 3, 5, 1.3, 2.5


def _oracles(started: bool = True, per_record: str = "vmap") -> list[dp_sgd.DpSgd]:
    privates = [dp_sgd.DpSgd(NOISE, CLIP, BATCH, 20, 1e-5, Sampler(4, "fixed", 2), c, 1, noise_source="seeded",
                             per_record=per_record) for c in range(CLIENTS)]  # fmt: skip
    if started:
        for c, private in enumerate(privates):
            private.start(UpdateRule(), torch.Generator().manual_seed(100 + c), torch.device("cpu"))
    return privates


def _direct(model: FlatModel, loss_fn, x: torch.Tensor, inputs, targets, client: int) -> tuple[torch.Tensor, int]:
    """One client's private gradient by hand: each record's autograd gradient at x, clipped to CLIP, summed, plus
    NOISE·CLIP times the first draw of the client's noise stream (seeded from its round generator's seed), over B;
    and how many records the clip scaled down."""
    model.x.copy_(x)
    total, clipped = torch.zeros(model.dim), 0
    for j in range(BATCH):
        model.loss_and_grad(loss_fn, inputs[j : j + 1], targets[j : j + 1])
        norm = float(model.grad.norm())
        total += model.grad * min(1.0, CLIP / norm)
        clipped += norm > CLIP
    seed = np.random.SeedSequence([100 + client, dp_sgd.NOISE_STREAM]).generate_state(1)[0]
    noise = torch.randn(model.dim, generator=torch.Generator().manual_seed(int(seed)))
    return (total + NOISE * CLIP * noise) / BATCH, clipped


def _cnn_group():
    torch.manual_seed(0)
    model = FlatModel(build_model("cnn", (1, 8, 8), 3, "classification"))
    xs = torch.stack([model.x.detach() + 0.05 * torch.randn(model.dim) for _ in range(CLIENTS)])
    scales = torch.linspace(0.01, 3.0, BATCH).view(1, BATCH, 1, 1, 1)  # records' gradient norms on both sides of CLIP
    inputs, targets = scales * torch.randn(CLIENTS, BATCH, 1, 8, 8), torch.randint(0, 3, (CLIENTS, BATCH))
    return model, loss_function("classification"), xs, inputs, targets


@pytest.mark.parametrize("per_record", ["vmap", "ghost"])
@pytest.mark.parametrize("pieces", [False, True])
def test_the_stacked_private_gradient_is_each_clients_clipped_sum_plus_its_own_noise(pieces, per_record):
    """In one piece, and in pieces of 2 records (5 = 2 + 2 + 1) when the per-record gradients of a piece (C·b·d
    floats) pass the piece's bytes; ghost clipping, which holds no per-record gradients, in one piece always."""
    model, loss_fn, xs, inputs, targets = _cnn_group()
    direct = [_direct(model, loss_fn, xs[c], inputs[c], targets[c], c) for c in range(CLIENTS)]
    want = torch.stack([gradient for gradient, _ in direct])
    assert 0 < sum(clipped for _, clipped in direct) < CLIENTS * BATCH  # the clip scales some records, not all
    mean_losses = []
    for c in range(CLIENTS):
        model.x.copy_(xs[c])
        mean_losses.append(float(model.loss_and_grad(loss_fn, inputs[c], targets[c])))
    stacked = StackedModel(model, CLIENTS)
    stacked.x.copy_(xs)
    piece_bytes = 2 * CLIENTS * model.dim * 4 if pieces else RECORD_GRADIENT_BYTES
    oracle = StackedPrivateModel(stacked, _oracles(per_record=per_record), piece_bytes=piece_bytes)
    assert oracle.records_per_piece() == (2 if pieces and per_record == "vmap" else BATCH)
    oracle.new_step()
    losses = oracle.loss_and_grad(loss_fn, inputs, targets)
    assert torch.allclose(stacked.grad, want, rtol=0, atol=1e-6 * float(want.abs().max()))
    assert torch.equal(stacked.x, xs)  # the iterate is untouched
    assert losses.tolist() == pytest.approx(mean_losses, rel=1e-6)
    assert [p.releases for p in oracle.privates] == [[1]] * CLIENTS


@pytest.mark.parametrize("per_record", ["vmap", "ghost"])
def test_the_stacked_private_gradient_equals_one_clients_release(per_record):
    """Row c is what client c's own `DpSgd.release` writes (the one-at-a-time path), draws included."""
    model, loss_fn, xs, inputs, targets = _cnn_group()
    alone = []
    for c, private in enumerate(_oracles(started=False, per_record=per_record)):
        oracle = private.bind(model, UpdateRule(), torch.Generator().manual_seed(100 + c))
        private.new_step()
        model.x.copy_(xs[c])
        oracle.loss_and_grad(loss_fn, inputs[c], targets[c])
        alone.append(model.grad.clone())
    stacked = StackedModel(model, CLIENTS)
    stacked.x.copy_(xs)
    oracle = StackedPrivateModel(stacked, _oracles(per_record=per_record))
    oracle.new_step()
    oracle.loss_and_grad(loss_fn, inputs, targets)
    want = torch.stack(alone)
    assert torch.allclose(stacked.grad, want, rtol=0, atol=1e-6 * float(want.abs().max()))


def _lsq_group(records: int = 12):
    generator = torch.Generator().manual_seed(3)
    datas = [LocalData(torch.randn(records, 4, generator=generator), torch.randn(records, generator=generator))
             for _ in range(CLIENTS)]  # fmt: skip
    return FlatModel(nn.Linear(4, 1)), datas


def _sam_rules() -> list[UpdateRule]:
    return [UpdateRule(point=SharpnessAware(0.05)) for _ in range(CLIENTS)]


def test_a_two_gradient_step_releases_two_private_gradients_per_client():
    model, datas = _lsq_group()
    privates = _oracles(started=False)
    x0s = [torch.zeros(model.dim) for _ in range(CLIENTS)]
    generators = [torch.Generator().manual_seed(100 + c) for c in range(CLIENTS)]
    train_stacked(model, x0s, datas, loss_function("regression"), _sam_rules(), generators=generators, lr=0.1,
                  steps=3, epochs=1, batch_size=BATCH, weight_decay=0.0, clip_norm=0.0, privates=privates)  # fmt: skip
    assert [p.releases for p in privates] == [[2, 2, 2]] * CLIENTS


def test_a_failed_stacked_attempt_leaves_every_ledger_as_it_was(monkeypatch):
    real, calls = StackedPrivateModel.loss_and_grad, []

    def broken(self, *args):
        calls.append(1)
        if len(calls) == 3:  # the second step's first gradient
            raise RuntimeError("no room on the card")
        return real(self, *args)

    monkeypatch.setattr(StackedPrivateModel, "loss_and_grad", broken)
    model, datas = _lsq_group()
    privates = _oracles(started=False)
    x0s = [torch.zeros(model.dim) for _ in range(CLIENTS)]
    generators = [torch.Generator().manual_seed(100 + c) for c in range(CLIENTS)]
    with pytest.raises(RuntimeError, match="no room on the card"):
        train_stacked(model, x0s, datas, loss_function("regression"), _sam_rules(), generators=generators, lr=0.1,
                      steps=3, epochs=1, batch_size=BATCH, weight_decay=0.0, clip_norm=0.0,
                      privates=privates)  # fmt: skip
    assert len(calls) == 3 and [p.releases for p in privates] == [[]] * CLIENTS


def test_a_group_whose_oracles_differ_or_miscount_is_refused():
    model, _ = _lsq_group()
    stacked = StackedModel(model, CLIENTS)
    privates = _oracles()
    privates[1].clip = 2 * CLIP
    with pytest.raises(ValueError, match="differ in noise, clip, batch size or dp-sgd-per-record"):
        StackedPrivateModel(stacked, privates)
    privates = _oracles()
    privates[2].per_record = "ghost"
    with pytest.raises(ValueError, match="differ in noise, clip, batch size or dp-sgd-per-record"):
        StackedPrivateModel(stacked, privates)
    with pytest.raises(ValueError, match="2 DP-SGD oracles for 3 stacked clients"):
        StackedPrivateModel(stacked, _oracles()[:2])
    oracle = StackedPrivateModel(stacked, _oracles())
    oracle.new_step()
    with pytest.raises(ValueError, match="trained on 4 records, expected batch size 5"):
        oracle.loss_and_grad(loss_function("regression"), torch.zeros(CLIENTS, 4, 4), torch.zeros(CLIENTS, 4))


def test_a_memory_probes_private_step_touches_no_clients_ledger_or_noise():
    model, loss_fn, xs, inputs, targets = _cnn_group()
    client = _oracles()[0]
    client.new_step()
    stream_state = client._noise_stream.get_state()
    stacked = StackedModel(model, CLIENTS)
    stacked.x.copy_(xs)
    probe = probe_oracle(stacked, client)
    probe.loss_and_grad(loss_fn, inputs, targets)
    assert [p.releases for p in probe.privates] == [[1]] * CLIENTS and all(p is not client for p in probe.privates)
    assert client.releases == [0] and torch.equal(client._noise_stream.get_state(), stream_state)
    assert bool(torch.isfinite(stacked.grad).all()) and float(stacked.grad.abs().max()) > 0
