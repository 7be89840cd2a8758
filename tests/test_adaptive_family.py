"""Math-verification harness for the adaptive family (docs/algorithms/fadamet.md and its siblings) and MimeSVRG.

The Adam stage against a hand-written float64 version on a small network; FAdamET/GT with y ≡ 0 are LocalAdam bit for
bit (and are not once tracking is on); y = mean_N(y_i) after every round under Bernoulli participation, Y < S and a
crashing client; trajectories against independent numpy implementations (`tests/reference_adaptive.py`); MimeSVRG's c
and its one-step identity; both MimeSVRG exchanges and their failures; communication per round
(docs/algorithms/index.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsuite.clients.fadamet import FAdamETClient
from fedsuite.clients.fadamgt import FAdamGTClient
from fedsuite.clients.mimesvrg import MimeSVRGClient
from fedsuite.local.adaptive import AdamStep
from fedsuite.local.loop import LocalData, UpdateRule, train_local
from fedsuite.models.networks import FlatModel
from fedsuite.registry import costs
from fedsuite.run.inprocess import client_store, remove_client_state, run_inprocess
from fedsuite.server.sampling import Sampler
from tests import reference_adaptive as refa
from tests.observing import Rows, Watch
from tests.reference import Federation, grad
from tests.test_drift_family import FED, MINIBATCH, PARTIAL, rel

ADAM = {"adam-beta1": 0.9, "adam-beta2": 0.99, "adam-eps": 1e-8}


# ---- the Adam stage --------------------------------------------------------------------------------------------
def test_adam_stage_over_two_rounds_equals_handwritten_float64():
    """m reset per round, v carried from the previous round, v̂ = max(v̂, v) starting at the carried v, no bias
    correction, coupled weight decay inside the moments: a 5-4-3 tanh network, K = 4 full-batch steps a round."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    model = FlatModel(net)
    inputs, targets = torch.randn(12, 5), torch.randint(0, 3, (12,))
    data, loss_fn = LocalData(inputs, targets), torch.nn.functional.cross_entropy
    lr, wd, (b1, b2, eps), k = 0.05, 0.01, (0.9, 0.99, 1e-8), 4
    net64 = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()

    def grad64(x: np.ndarray) -> np.ndarray:
        torch.nn.utils.vector_to_parameters(torch.tensor(x), net64.parameters())
        net64.zero_grad()
        loss_fn(net64(inputs.double()), targets).backward()
        return torch.cat([p.grad.reshape(-1) for p in net64.parameters()]).numpy()

    def reference_round(x, v):
        m, vhat = np.zeros_like(x), v.copy()
        for _ in range(k):
            g = grad64(x) + wd * x
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            vhat = np.maximum(vhat, v)
            x = x - lr * m / (np.sqrt(vhat) + eps)
        return x, v, vhat

    def fedsuite_round(x, v):
        step = AdamStep(torch.tensor(v, dtype=torch.float32), b1, b2, eps)
        result = train_local(model, torch.tensor(x, dtype=torch.float32), data, loss_fn, UpdateRule(step=step),
                             lr=lr, weight_decay=wd, clip_norm=0.0, epochs=k, steps=0, batch_size=0,
                             generator=torch.Generator().manual_seed(0))  # fmt: skip
        assert result.steps == k
        return result.x.double().numpy().copy(), step.v.double().numpy(), step.vhat.double().numpy()

    x0 = model.x.double().numpy().copy()
    x1, v1, _ = reference_round(x0, np.zeros_like(x0))
    y1, w1, _ = fedsuite_round(x0, np.zeros_like(x0))
    x2, v2, vhat2 = reference_round(x1, v1)
    y2, w2, _ = fedsuite_round(y1, w1)
    np.testing.assert_allclose(y1, x1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w1, v1, rtol=1e-4, atol=1e-10)
    np.testing.assert_allclose(y2, x2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w2, v2, rtol=1e-4, atol=1e-10)
    assert np.any(vhat2 > v2 * (1 + 1e-3))  # the AMSGrad max is active in round 2
    fresh, _, _ = fedsuite_round(y1, np.zeros_like(x0))
    assert rel(fresh, x2) > 1e-3  # restarting v instead of carrying it is visibly different


# ---- reductions --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["fadamet", "fadamgt"])
def test_tracking_with_y_forced_to_zero_is_localadam_bit_for_bit(algorithm, monkeypatch):
    cfg = {**MINIBATCH, "lr": 0.01, **ADAM}
    localadam = run_inprocess({**cfg, "algorithm": "localadam"}).x
    tracked = run_inprocess({**cfg, "algorithm": algorithm}).x
    monkeypatch.setattr(Sampler, "tracking", lambda self, server_round, cohort, size=0: [])
    untracked = run_inprocess({**cfg, "algorithm": algorithm}).x
    assert np.array_equal(untracked, localadam)
    assert rel(tracked, localadam) > 1e-4


# ---- the tracking invariant (docs/developer/verification.md) -------------------------------------------------------
BERNOULLI = {"dataset": "synthetic-lsq", "num-clients": 8, "sampling": "bernoulli", "participation": 0.5,
             "synthetic-dim": 6, "synthetic-samples": 16, "batch-size": 4, "local-steps": 5, "lr": 0.01,
             "num-server-rounds": 7, "eval-every": 1000, "tracking-clients": 1}  # fmt: skip


def stored(strategy, pid: int, name: str) -> np.ndarray:
    store = client_store(strategy, pid)
    return np.asarray(store[name], np.float64) if name in store else np.zeros(strategy.dim)


@pytest.mark.parametrize("algorithm,client", [("fadamet", FAdamETClient), ("fadamgt", FAdamGTClient)])
def test_y_is_the_mean_of_all_client_y_i_after_every_round(algorithm, client, monkeypatch):
    """Bernoulli cohorts, |Y^t| = 1 < |S^t|, and a client of Y^2 that crashes after training in round 2."""
    cfg = {**BERNOULLI, "algorithm": algorithm}
    sampler = Sampler(8, "bernoulli", participation=0.5, seed=0)
    assert all(len(sampler.cohort(r)) > 1 for r in range(1, 8))  # so Y^t ⊊ S^t every round
    crashing = sampler.tracking(2, sampler.cohort(2), 1)[0]
    original = client.uplink

    def uplink(self, result, rule, ctx):
        out = original(self, result, rule, ctx)
        if self.node.partition_id == crashing and ctx.round == 2:
            raise RuntimeError("client crashed after computing its new y_i and v_i")
        return out

    monkeypatch.setattr(client, "uplink", uplink)
    gaps, replies, tracked_ids = [], [], []

    def checked(server_round, strategy, x_before, rs):
        replies.append({r.partition_id for r in rs})
        tracked_ids.append({r.partition_id for r in rs if "delta_y" in r.arrays})
        mean_yi = np.mean([stored(strategy, pid, "y_i") for pid in range(8)], axis=0)
        gaps.append(np.abs(strategy.rule.y - mean_yi).max())

    strategy = run_inprocess(cfg, observers=[Watch(aggregated=checked)], keep_client_state=True)
    has_v = {pid for pid in range(8) if np.abs(stored(strategy, pid, "v_i")).max() > 0}
    has_y = {pid for pid in range(8) if np.abs(stored(strategy, pid, "y_i")).max() > 0}
    remove_client_state(strategy)
    assert len(gaps) == 7 and max(gaps) < 1e-6
    assert crashing not in replies[1]  # the crash happened and was survived
    assert all(len(t) <= 1 for t in tracked_ids) and sum(map(len, tracked_ids)) >= 5
    assert np.abs(strategy.rule.y).max() > 1e-3  # y is not trivially zero
    # clients outside Y^t refresh v_i only: someone has a v_i but no y_i
    assert has_y < has_v


def test_tracking_subset_is_seeded_half_the_realised_cohort_and_independent_of_the_algorithm():
    sampler = Sampler(40, "bernoulli", participation=0.3, seed=5)
    for r in range(1, 30):
        cohort = sampler.cohort(r)
        tracked = sampler.tracking(r, cohort)
        assert set(tracked) <= set(cohort) and len(tracked) == max(1, len(cohort) // 2)
        assert tracked == sampler.tracking(r, cohort) == sorted(tracked)
        assert sampler.tracking(r, cohort, 3) == sampler.tracking(r, list(cohort), 3) and len(tracked) >= 1
        assert len(sampler.tracking(r, cohort, 1000)) == len(cohort)
    fixed = Sampler(100, "fixed", clients_per_round=10, seed=0)
    draws = {tuple(fixed.tracking(r, fixed.cohort(r), 5)) for r in range(1, 21)}
    assert len(draws) == 20 and all(len(d) == 5 for d in draws)
    assert Sampler(100, "fixed", 10, seed=1).tracking(3, fixed.cohort(3), 5) != fixed.tracking(3, fixed.cohort(3), 5)


# ---- trajectories against the independent numpy implementations ------------------------------------------
TRAJECTORIES = [
    ("localadam", {}, lambda f: refa.fadam(f, "local")),
    ("fadamet", {"tracking-clients": 2}, lambda f: refa.fadam(f, "et", 2)),
    ("fadamgt", {"tracking-clients": 2}, lambda f: refa.fadam(f, "gt", 2)),
    ("fadamet", {"sampling": "bernoulli", "participation": 0.5}, lambda f: refa.fadam(f, "et")),
    ("fadamgt", {"sampling": "bernoulli", "participation": 0.5}, lambda f: refa.fadam(f, "gt")),
    ("fedlada", {"fedlada-alpha": 0.3}, lambda f: refa.fedlada(f, 0.3)),
    ("mimesvrg", {}, lambda f: refa.mimesvrg(f)),
]  # fmt: skip


@pytest.mark.parametrize(
    "algorithm,extra,reference", TRAJECTORIES, ids=[f"{a}-{i}" for i, (a, *_) in enumerate(TRAJECTORIES)]
)
def test_partial_participation_trajectory_matches_numpy_reference(algorithm, extra, reference):
    cfg = {**PARTIAL, "algorithm": algorithm, **ADAM, **extra}
    expected = reference(Federation(cfg))
    strategy = run_inprocess(cfg)
    assert rel(strategy.x, expected) < 1e-5
    assert rel(strategy.x, Federation(cfg).x0) > 1e-2  # it moved


def test_fadamgt_with_full_tracking_ends_closer_to_the_optimum_than_localadam():
    """Full participation, Y = S, full-batch gradients: gradient tracking removes the client drift that
    LocalAdam keeps (figures in docs/developer/verification.md)."""
    cfg = {**FED, "num-server-rounds": 300, "lr": 0.005, "tracking-clients": 5, **ADAM}
    errors = {a: run_inprocess({**cfg, "algorithm": a}) for a in ("localadam", "fadamgt")}
    errors = {a: s.plan.evaluate(s.x)["relative_error"] for a, s in errors.items()}
    assert errors["fadamgt"] < 0.5 * errors["localadam"], errors


# ---- MimeSVRG --------------------------------------------------------------------------------------------------
def test_mimesvrg_c_is_the_mean_full_gradient_and_one_step_is_a_full_batch_gradient_step():
    """K = 1 on minibatches of 7: g(x^t; ξ) − g(x^t; ξ) + c = c, so x^1 = x^0 − η(mean_S ∇F_i(x^0) + wd·x^0)."""
    cfg = {**MINIBATCH, "algorithm": "mimesvrg", "local-steps": 1, "num-server-rounds": 1}
    f = Federation(cfg)
    cohort = f.sampler.cohort(1)
    assert len(cohort) < f.n
    c = np.mean([grad(*f.clients[i], f.x0) for i in cohort], axis=0)
    last_query = []
    strategy = run_inprocess(cfg, observers=[Watch(queried=lambda *query: last_query.append(query))])
    np.testing.assert_allclose(strategy.rule.c, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(strategy.x, f.x0 - f.lr(0) * (c + f.wd * f.x0), rtol=1e-5, atol=1e-6)
    ((_, x_asked, answers),) = last_query
    assert sorted(answers) == cohort and np.array_equal(x_asked, strategy.plan.initial_x)
    two = run_inprocess({**cfg, "local-steps": 2}).x  # minibatch noise enters from the second step on
    two_full = f.x0 - f.lr(0) * (c + f.wd * f.x0)
    assert rel(two, two_full) > 1e-3


@pytest.mark.parametrize("phase", ["gradient", "fit"])
def test_mimesvrg_client_failing_either_exchange_is_a_failure_of_the_round(phase, monkeypatch):
    cfg = {**PARTIAL, "algorithm": "mimesvrg", "num-server-rounds": 3}
    f = Federation(cfg)
    crashing = f.sampler.cohort(2)[1]
    name = "answer" if phase == "gradient" else "uplink"
    original = getattr(MimeSVRGClient, name)

    def failing(self, *args):
        if self.node.partition_id == crashing and args[-1].round == 2:
            raise RuntimeError(f"client crashed in the {phase} exchange")
        return original(self, *args)

    monkeypatch.setattr(MimeSVRGClient, name, failing)
    rows, asked_at, queries = Rows(), {}, {}

    def queried(server_round, x, answers):
        asked_at[server_round] = x.astype(np.float64)

    def aggregated(server_round, strategy, x_before, replies):  # MimeSVRG's aggregate leaves this round's c as it is
        queries[server_round] = (strategy.rule.c.copy(), asked_at[server_round])

    run_inprocess(cfg, observers=[rows, Watch(queried=queried, aggregated=aggregated)])
    row = next(r for r in rows.rows if r["round"] == 2)
    lost = row["failures"] + row["rejected"]  # a crash in fit comes back as an error reply (rejected)
    assert lost == 1 and row["replies"] == len(f.sampler.cohort(2)) - 1
    answered = [i for i in f.sampler.cohort(2) if phase == "fit" or i != crashing]
    c, x = queries[2]
    np.testing.assert_allclose(c, np.mean([grad(*f.clients[i], x) for i in answered], axis=0), rtol=1e-5, atol=1e-6)
    assert all(r["failures"] + r["rejected"] == 0 for r in rows.rows if r["round"] in (1, 3))


# ---- communication (docs/algorithms/index.md; the FAdamET paper's Table 1) ------------------------------------
def test_registry_declares_the_fadamet_table_1_communication():
    """Down + up d-vectors per participating client per round; FAdamET/GT at Y = S/2: 3 + 1/2
    (docs/algorithms/index.md)."""
    per_round = {a: sum(costs.vectors(a)) + costs.tracking_up(a) / 2 for a in
                 ("fedavg", "scaffold", "localadam", "fedlada", "fadamet", "fadamgt")}  # fmt: skip
    assert per_round == {"fedavg": 2, "scaffold": 4, "localadam": 2, "fedlada": 5, "fadamet": 3.5, "fadamgt": 3.5}
    assert costs.vectors("mimesvrg") == (3, 2)  # x twice (both exchanges), c; ∇F_i(x^t) and Δ_i
    assert [costs.client_state_vectors(a, None) for a in ("localadam", "fadamet", "fadamgt")] == [1, 2, 2]


@pytest.mark.parametrize("algorithm", ["localadam", "fadamet", "fadamgt", "fedlada", "mimesvrg"])
def test_measured_communication_matches_the_registry(algorithm):
    rows = Rows()
    cfg = {**BERNOULLI, "algorithm": algorithm, "num-server-rounds": 3, "tracking-clients": 0}
    strategy = run_inprocess(cfg, observers=[rows])
    (down, up_all), up_some = costs.vectors(algorithm), costs.tracking_up(algorithm)
    sampler = Sampler(8, "bernoulli", participation=0.5, seed=0)
    for row in (r for r in rows.rows if r["round"] > 0):
        cohort = sampler.cohort(row["round"])
        up = up_all + up_some * len(sampler.tracking(row["round"], cohort)) / len(cohort)
        assert row["replies"] == len(cohort)
        assert row["vectors_down_per_client"] == down
        assert row["vectors_up_per_client"] == pytest.approx(up, abs=1e-12)
        assert row["bytes_up_per_client"] == pytest.approx(up * strategy.dim * 4)


@pytest.mark.parametrize("algorithm", ["fadamet", "fadamgt"])
def test_a_rejected_reply_leaves_neither_y_i_nor_v_i_ahead_of_the_server(algorithm, monkeypatch):
    """The server rejects the reply of round 2's tracked client after that client saved its new y_i and v_i:
    y = mean_N y_i (the state each client will train with next, fedsuite.state.store.effective) after every round, and
    with the undo switched off the invariant breaks."""
    import fedsuite.state.tier as state_module
    from tests.test_client_state import mean_state_gaps, reject_in_round

    cfg = {**BERNOULLI, "algorithm": algorithm, "min-replies": 0.0}
    sampler = Sampler(8, "bernoulli", participation=0.5, seed=0)
    fault = reject_in_round(sampler.tracking(2, sampler.cohort(2), 1)[0], 2)
    gaps = mean_state_gaps(cfg, lambda rule: rule.y, "y_i", (fault,))
    assert len(gaps) == 7 and max(gaps) < 1e-6
    monkeypatch.setattr(state_module, "settle", lambda store, accepted_round: None)
    broken = max(mean_state_gaps(cfg, lambda rule: rule.y, "y_i", (fault,)))
    assert broken > 1e-4, broken  # the rejected Δy_i would sit in the client's y_i but not in the server's y
