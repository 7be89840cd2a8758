"""Math harness for the LoSAC family (docs/algorithms/losac.md): LoSAC, FedSaga, LoSAC-Prox, SCAFFOLD-Prox, and the
shared options they brought (fixed data blocks for any algorithm, sum-reduced losses, the 1/N aggregation).

Each claim is checked on both sides: LoSAC reaches x* where FedSaga and FedAvg visibly do not; the factor-1
bookkeeping keeps ϕ = Σ_n ḡ_n and the paper's N/S factor breaks it; trajectories equal independent float64 numpy
implementations (tests/reference_losac.py) under partial participation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.local.loop import LocalData, StepContext
from fedsuite.local.variance import BlockTable, FixedBlocks, NuclearShrink, SoftThreshold, numerical_rank
from fedsuite.registry import costs
from fedsuite.run.inprocess import client_store, run_inprocess
from fedsuite.server.sampling import Sampler
from fedsuite.state.files import read_arrays
from fedsuite.state.store import effective, state_bytes
from tests import reference_losac as ref
from tests.observing import Watch
from tests.test_client_state import reject_in_round

# Heterogeneous least squares, 5 clients with their own optima, closed-form x*.
FED = {
    "dataset": "synthetic-lsq",
    "num-clients": 5,
    "clients-per-round": 5,
    "synthetic-dim": 4,
    "synthetic-samples": 20,
    "synthetic-heterogeneity": 1.0,
    "local-steps": 10,
    "lr": 0.05,
    "eval-every": 100000,
}
# Partial participation, lr decay, M = 4 blocks of 5 rows drawn at random: trajectories against numpy.
PARTIAL = {**FED, "num-clients": 6, "clients-per-round": 3, "local-steps": 4, "num-server-rounds": 8,
           "lr-decay": 0.97, "lr": 0.03, "losac-blocks": 4, "synthetic-samples": 20}  # fmt: skip
# Bernoulli participation for the ϕ bookkeeping: the realised cohort size varies and some clients stay unvisited.
BERNOULLI = {**PARTIAL, "num-clients": 8, "sampling": "bernoulli", "participation": 0.4, "num-server-rounds": 7,
             "min-replies": 0.0}  # fmt: skip


def relative_error(cfg: dict) -> float:
    strategy = run_inprocess(cfg)
    return strategy.plan.evaluate(strategy.x)["relative_error"]


def rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


# ---- fixed points: LoSAC and SCAFFOLD remove client drift, FedSaga and FedAvg do not -----------------------
@pytest.mark.parametrize("algorithm", ["losac", "scaffold"])
def test_losac_and_scaffold_reach_the_optimum_with_full_block_gradients(algorithm):
    cfg = {**FED, "algorithm": algorithm, "num-server-rounds": 250, "local-batches": "blocks", "losac-blocks": 1}
    assert relative_error(cfg) < 1e-4


@pytest.mark.parametrize("algorithm", ["fedsaga", "fedavg"])
def test_fedsaga_and_fedavg_stay_at_the_drift_bias(algorithm):
    cfg = {**FED, "algorithm": algorithm, "num-server-rounds": 250, "local-batches": "blocks", "losac-blocks": 1}
    assert relative_error(cfg) > 1e-2


def test_losac_with_several_blocks_still_reaches_the_optimum_and_fedsaga_does_not():
    """Stochastic block gradients (M = 4): LoSAC's table makes the step variance-reduced (SAGA), so a constant
    η still converges to x*; FedSaga's local table alone converges to the drifted point."""
    cfg = {**FED, "num-server-rounds": 400, "losac-blocks": 4, "lr": 0.03}
    assert relative_error({**cfg, "algorithm": "losac"}) < 1e-4
    assert relative_error({**cfg, "algorithm": "fedsaga"}) > 1e-2


# ---- trajectories against independent float64 numpy implementations --------------------------------------
def l1(lam):
    return lambda x, lr: ref.soft_threshold(x, lr * lam)


TRAJECTORIES = [
    ("losac", {}, lambda f: ref.losac(f)),
    ("losac", {"losac-phi-scale": "N/S"}, lambda f: ref.losac(f, phi_scale="N/S")),
    ("losac", {"loss-reduction": "sum", "lr": 0.006}, lambda f: ref.losac(f)),
    ("fedsaga", {}, lambda f: ref.losac(f, local_table=True)),
    ("losac-prox", {"prox-penalty": "l1", "prox-lambda": 0.5}, lambda f: ref.losac(f, prox=l1(0.5))),
    ("scaffold", {"local-batches": "blocks"}, lambda f: ref.scaffold_blocks(f)),
    ("scaffold-prox", {"prox-penalty": "l1", "prox-lambda": 0.5}, lambda f: ref.scaffold_blocks(f, prox=l1(0.5))),
]  # fmt: skip


@pytest.mark.parametrize(
    "algorithm,extra,reference", TRAJECTORIES, ids=[f"{a}-{i}" for i, (a, *_) in enumerate(TRAJECTORIES)]
)
def test_partial_participation_trajectory_matches_numpy_reference(algorithm, extra, reference):
    cfg = {**PARTIAL, "algorithm": algorithm, **extra}
    if algorithm == "scaffold-prox":
        cfg["local-batches"] = "blocks"
    f = ref.BlockFederation(cfg)
    expected = reference(f)
    strategy = run_inprocess(cfg)
    assert rel(strategy.x, expected) < 1e-5
    assert rel(strategy.x, f.x0) > 1e-2  # it moved


# ---- ϕ bookkeeping (docs/algorithms/losac.md): factor 1 keeps ϕ = Σ_n mean_j y_{n,j}; N/S does not ------------
def phi_gaps(monkeypatch, cfg: dict, crash: int | None = None, reject: int | None = None) -> tuple[list[float], int]:
    """After every round: max |ϕ − Σ_n ḡ_n| over the clients' effective tables; and the number of failed replies."""
    from fedsuite.clients.losac import LoSACClient

    if crash is not None:
        original = LoSACClient.uplink

        def uplink(self, result, rule, ctx):
            if self.node.partition_id == crash and ctx.round == 2:
                raise RuntimeError("client crashed")
            return original(self, result, rule, ctx)

        monkeypatch.setattr(LoSACClient, "uplink", uplink)
    faults = [reject_in_round(reject, 3)] if reject is not None else []
    names = [f"y_{j}" for j in range(int(cfg["losac-blocks"]))]
    gaps, failed = [], []

    def checked(server_round, strategy, x_before, replies):
        total = np.zeros(strategy.dim)
        for pid in range(cfg["num-clients"]):
            view = effective(client_store(strategy, pid), strategy.accepted.get(pid, 0))
            total += np.mean([view.get(n, np.zeros(strategy.dim)) for n in names], axis=0)
        gaps.append(float(np.abs(strategy.rule.phi - total).max()))

    def counted(row):
        if row["round"] > 0:
            failed.append(row["failures"] + row["rejected"])

    strategy = run_inprocess(cfg, observers=[*faults, Watch(aggregated=checked, recorded=counted)])
    assert np.abs(strategy.rule.phi).max() > 1e-2  # ϕ is not trivially zero
    return gaps, sum(failed)


def test_phi_is_the_sum_of_all_client_table_means_under_partial_participation_and_failures(monkeypatch):
    sampler = Sampler(8, "bernoulli", participation=0.4, seed=0)
    crash, reject = sampler.cohort(2)[0], sampler.cohort(3)[-1]
    gaps, failed = phi_gaps(monkeypatch, {**BERNOULLI, "algorithm": "losac"}, crash=crash, reject=reject)
    assert len(gaps) == 7 and max(gaps) < 1e-5
    assert failed >= 2  # the crash and the rejection both happened and were survived


def test_the_papers_n_over_s_factor_breaks_the_phi_bookkeeping(monkeypatch):
    gaps, _ = phi_gaps(monkeypatch, {**BERNOULLI, "algorithm": "losac", "losac-phi-scale": "N/S"})
    assert max(gaps) > 1e-2


# ---- reductions and shared options -------------------------------------------------------------------------
def test_first_step_of_losac_is_fedavg_on_the_same_block():
    """ϕ = 0 and y = 0 at the start: the first step is plain block SGD; from the second step on ϕ_i already
    holds the first block's gradient, so K = 4 steps differ from FedAvg."""
    cfg = {**PARTIAL, "num-server-rounds": 1, "local-batches": "blocks", "local-steps": 1}
    losac, fedavg = run_inprocess({**cfg, "algorithm": "losac"}).x, run_inprocess({**cfg, "algorithm": "fedavg"}).x
    assert rel(losac, fedavg) < 1e-6
    more = {**cfg, "local-steps": 4}
    assert rel(run_inprocess({**more, "algorithm": "losac"}).x, run_inprocess({**more, "algorithm": "fedavg"}).x) > 1e-4


def test_prox_with_zero_lambda_is_the_plain_algorithm():
    for prox, plain, extra in (("losac-prox", "losac", {}), ("scaffold-prox", "scaffold", {"local-batches": "blocks"})):
        cfg = {**PARTIAL, **extra, "prox-lambda": 0.0}
        assert rel(run_inprocess({**cfg, "algorithm": prox}).x, run_inprocess({**cfg, "algorithm": plain}).x) < 1e-6
        on = run_inprocess({**cfg, "algorithm": prox, "prox-lambda": 0.5}).x
        assert rel(on, run_inprocess({**cfg, "algorithm": plain}).x) > 1e-3


def test_sum_reduction_equals_mean_reduction_with_the_step_scaled_by_the_block_size():
    """Equal blocks of 5 rows: ∇(sum loss) = 5·∇(mean loss), so (sum, η) is (mean, 5η) exactly."""
    cfg = {**PARTIAL, "algorithm": "losac"}
    summed = run_inprocess({**cfg, "loss-reduction": "sum", "lr": 0.006}).x
    assert rel(summed, run_inprocess({**cfg, "lr": 0.03}).x) < 1e-5
    assert rel(summed, run_inprocess({**cfg, "lr": 0.006}).x) > 1e-3


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold", "losac"])
def test_agg_scale_one_over_n_is_the_mean_times_s_over_n(algorithm):
    """eq. (13): x + Σ_S Δ_i / N = x + (S/N)·mean_S Δ_i under fixed sampling."""
    cfg = {**PARTIAL, "algorithm": algorithm, "local-batches": "blocks"}
    literal = run_inprocess({**cfg, "agg-scale": "1/N"}).x
    assert rel(literal, run_inprocess({**cfg, "server-lr": 0.5}).x) < 1e-6  # S/N = 3/6
    assert rel(literal, run_inprocess(cfg).x) > 1e-3


def test_agg_scale_is_refused_for_algorithms_outside_the_losac_suite():
    with pytest.raises(ConfigError, match="agg-scale='1/N'.*algorithm='feddyn' allows mean"):
        resolve({"algorithm": "feddyn", "agg-scale": "1/N"})
    with pytest.raises(ConfigError, match="weighting='uniform'"):
        resolve({"algorithm": "losac", "agg-scale": "1/N", "weighting": "samples"})


def test_the_memory_estimate_counts_the_block_table():

    cfg = resolve({"algorithm": "losac", "losac-blocks": 5})
    vectors = costs.client_state_vectors("losac", cfg)
    assert vectors == 5 and state_bytes(100, 1000, vectors) == 100 * 1000 * 5 * 4 * 2


def test_block_tables_persist_on_disk_like_every_client_state(tmp_path):
    cfg = {**PARTIAL, "algorithm": "losac", "client-state": "disk", "client-state-dir": str(tmp_path)}
    memory = run_inprocess({**PARTIAL, "algorithm": "losac"}).x
    assert rel(run_inprocess(cfg).x, memory) < 1e-6
    files = sorted(tmp_path.glob("partition-*.state"))
    assert files and {f"y_{j}" for j in range(4)} <= set(read_arrays(files[0]))


# ---- the stages themselves -----------------------------------------------------------------------------------
def test_fixed_blocks_are_a_seeded_partition_and_steps_draw_whole_blocks():
    blocks = FixedBlocks(23, 5, seed=3, partition_id=7)
    rows = torch.cat(blocks.blocks).sort().values
    assert torch.equal(rows, torch.arange(23)) and [len(b) for b in blocks.blocks] == [5, 5, 5, 4, 4]
    assert all(torch.equal(a, b) for a, b in zip(blocks.blocks, FixedBlocks(23, 5, 3, 7).blocks, strict=True))
    assert not torch.equal(blocks.blocks[0], FixedBlocks(23, 5, 3, 8).blocks[0])
    data = LocalData(torch.arange(23.0)[:, None], torch.arange(23))
    seen = list(blocks(data, epochs=2, steps=0, batch_size=0, generator=torch.Generator().manual_seed(0)))
    assert sorted(j for *_, j in seen) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]  # epoch mode: every block once per epoch
    for _, targets, j in seen:
        assert torch.equal(targets.sort().values, blocks.blocks[j].sort().values)
    with pytest.raises(ValueError, match="losac-blocks=30"):
        FixedBlocks(23, 30, 0, 0)


def test_block_table_step_matches_the_formula():
    table = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])]
    phi = torch.tensor([4.0, -2.0])
    correction = BlockTable(table, phi, scale=2.0)
    d = torch.tensor([3.0, 3.0])  # G_1(x)
    correction(d, StepContext(x=torch.zeros(2), x0=torch.zeros(2), block=1))
    assert torch.allclose(d, torch.tensor([3.0 + 2.0 - 0.0, 3.0 - 1.0 - 2.0]))  # G + ϕ/N − y_1
    assert torch.allclose(phi, torch.tensor([4.0 + 1.5, -2.0 + 0.5]))  # ϕ + (G − y_1)/M
    assert torch.equal(table[1], torch.tensor([3.0, 3.0])) and torch.equal(correction.change, torch.tensor([1.5, 0.5]))


def test_soft_threshold_is_the_l1_proximal_operator():
    x = torch.tensor([3.0, -0.2, 0.5, -2.0])
    SoftThreshold(lam=2.0)(x, 0.5, None)  # threshold η·λ = 1
    assert torch.equal(x, torch.tensor([2.0, 0.0, 0.0, -1.0]))
    # closed form: argmin_z ½‖z − v‖² + t‖z‖₁, checked against a fine grid per coordinate
    v, t = np.array([1.7, -0.3, 0.05]), 0.4
    grid = np.linspace(-3, 3, 60001)
    brute = [grid[np.argmin(0.5 * (grid - vi) ** 2 + t * np.abs(grid))] for vi in v]
    assert np.allclose(ref.soft_threshold(v, t), brute, atol=1e-4)


def test_svd_shrinkage_lowers_the_rank_as_predicted():
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    v, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    sigma = np.array([5.0, 3.0, 1.5, 0.8, 0.2])
    matrix = (u[:, :5] * sigma) @ v.T
    bias = np.array([0.7, -0.7])
    x = torch.tensor(np.concatenate([matrix.ravel(), bias]), dtype=torch.float64)
    NuclearShrink(lam=1.0, shapes=[torch.Size([6, 5]), torch.Size([2])])(x, 1.0, None)  # threshold 1
    shrunk = x[:30].view(6, 5).numpy()
    assert np.allclose(np.linalg.svd(shrunk, compute_uv=False), [4.0, 2.0, 0.5, 0.0, 0.0], atol=1e-10)
    assert numerical_rank(matrix) == 5 and numerical_rank(shrunk) == 3
    assert np.allclose(shrunk, (u[:, :5] * np.maximum(sigma - 1, 0)) @ v.T)  # U diag(max(σ − t, 0)) Vᵀ
    assert torch.equal(x[30:], torch.tensor(bias))  # vectors are not matrices: untouched
