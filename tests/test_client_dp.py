"""Client-level differential privacy (docs/privacy.md): the plain run is untouched when privacy adds nothing, every
release is clipped jointly, the noise on the sum has the promised std, the budget comes from the accountant and a
target ε stops the run, adaptive clipping follows its geometric rule, and bad settings are refused in one line."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from fedsuite.config.run_config import ConfigError, resolve
from fedsuite.privacy.accountant import POISSON, RunAccountant
from fedsuite.privacy.release import client_release, noise_generator
from fedsuite.registry.known import ALGORITHMS
from fedsuite.rules.rounds import Reply
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.compose import server_privacy
from fedsuite.server.observers import RoundObserver
from fedsuite.server.privacy import ServerPrivacy
from fedsuite.testing.kit import PARTIAL, check_checkpoint_round_trip

dp_accounting = pytest.importorskip("dp_accounting")
PRIVATE = [name for name, algo in ALGORITHMS.items() if not algo.refusal("dp")]


class Releases(RoundObserver):
    """Keeps every reply's arrays as the server's rule receives them."""

    def __init__(self):
        self.replies: list[Reply] = []

    def replied(self, server_round, replies):
        self.replies += [Reply(r.partition_id, r.num_examples, r.steps, r.lr, dict(r.arrays)) for r in replies]


@pytest.mark.parametrize("algorithm", PRIVATE)
def test_no_noise_and_a_clip_nothing_reaches_leave_every_algorithm_bit_identical(algorithm):
    """σ = 0 and a C no upload reaches: both trust models give the plain run's final model byte for byte."""
    base = {**PARTIAL, "algorithm": algorithm}
    plain = run_inprocess(base).x
    for mode in ("server", "clients"):
        private = run_inprocess({**base, "dp": mode, "dp-noise": 0.0, "dp-clip": 1e30}).x
        assert private.tobytes() == plain.tobytes(), f"{algorithm}, dp={mode}"


@pytest.mark.parametrize("algorithm", PRIVATE)
def test_every_release_is_clipped_jointly(algorithm):
    """Client-side invariant: the joint L2 norm of everything one client uploads in a round is at most C (σ = 0,
    so the server sees exactly the clipped release), and a C this small does clip (the norms reach it)."""
    releases, clip = Releases(), 0.01
    run_inprocess({**PARTIAL, "algorithm": algorithm, "dp": "server", "dp-noise": 0.0, "dp-clip": clip},
                  observers=[releases])  # fmt: skip
    norms = [math.sqrt(sum(float(np.sum(a**2)) for a in r.arrays.values())) for r in releases.replies]
    assert norms and max(norms) <= clip * (1 + 1e-6)
    assert max(norms) >= clip * (1 - 1e-4), f"{algorithm}: no upload reached C={clip}; the test proves nothing"


def _zero_replies(cohort: int, dim: int) -> list[Reply]:
    return [Reply(pid, 1, 1, 0.1, {"delta": np.zeros(dim), "delta_c": np.zeros(dim)}) for pid in range(cohort)]


@pytest.mark.parametrize("mode", ["server", "clients"])
def test_the_noise_on_the_sum_has_std_sigma_times_c(mode):
    """A zero-update federation: the cohort's mean of the released arrays is pure noise of std σ·C/S per
    coordinate, in both trust models (clients: S shares of std σ·C/√S). With 40 000 coordinates the sample std is
    within 2 % of the truth with probability far above 1 − 10⁻⁶ (its relative std is 1/√(2·40 000) ≈ 0.35 %)."""
    cohort, dim, sigma, clip = 8, 20_000, 1.7, 0.4
    cfg = resolve({**PARTIAL, "dp": mode, "dp-noise": sigma, "dp-clip": clip, "num-clients": 16,
                   "clients-per-round": cohort})  # fmt: skip
    privacy = ServerPrivacy(cfg.privacy, 16, cohort, seed=3, count_noise=1.0)
    privacy.fit_config(1, cohort)
    replies = _zero_replies(cohort, dim)
    if mode == "clients":
        for r in replies:
            zeros = {k: torch.from_numpy(v) for k, v in r.arrays.items()}
            released, _ = client_release(zeros, cfg.privacy, clip, cohort, 1.0, noise_generator(3, 1, r.partition_id))
            r.arrays = {k: v.numpy() for k, v in released.items()}
    privacy.release(1, replies)
    mean = np.concatenate([sum(r.arrays[name] for r in replies) / cohort for name in ("delta", "delta_c")])
    assert abs(mean.mean()) < 5 * sigma * clip / cohort / math.sqrt(2 * dim)
    assert mean.std() == pytest.approx(sigma * clip / cohort, rel=0.02)


def test_the_budget_is_the_accountants_and_a_target_stops_the_run(tmp_path):
    """Rows carry ε after each round, equal to the accountant's for the same rounds; with a target the run stops
    (status budget-spent, exit code 0) before the round that would exceed it, and the summary says so."""
    cfg = {**PARTIAL, "algorithm": "scaffold", "dp": "server", "dp-noise": 3.0, "dp-clip": 0.5,
           "num-server-rounds": 12, "out-dir": str(tmp_path), "run-name": "dp"}  # fmt: skip
    sigma, sample, population = 3.0, PARTIAL["clients-per-round"], PARTIAL["num-clients"]
    accountant = RunAccountant(1e-5)  # one accountant: the library's divergences of the round computed once
    fits = accountant.rounds_within(8.0, sigma, sample, population, 12)
    assert 1 < fits < 12  # the target binds inside the run
    run_inprocess({**cfg, "dp-target-epsilon": 8.0}, record=True)
    rows = [json.loads(line) for line in (tmp_path / "dp" / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(fits + 1))
    for row in rows[1:]:
        expected = accountant.epsilon({(sigma, sample, population): row["round"]})
        assert row["dp_epsilon"] == pytest.approx(expected, rel=1e-12) and row["dp_epsilon"] <= 8.0
    summary = json.loads((tmp_path / "dp" / "summary.json").read_text())
    assert summary["status"] == "budget-spent" and "dp-target-epsilon=8" in summary["reason"]


def test_the_accountant_agrees_with_the_exact_gaussian_curve():
    """All clients every round (q = 1): the mechanism is the Gaussian mechanism with sensitivity 2C (replace-one)
    and noise σC, whose exact δ(ε) is known in closed form (Balle and Wang, 2018). The accountant's ε must be an
    upper bound on the exact one and close to it; forgetting the factor 2 of replace-one would put it below."""
    from scipy.stats import norm

    sigma, delta = 4.0, 1e-5
    epsilon = RunAccountant(delta, {(sigma, 10, 10): 1}).epsilon()
    ratio = 2.0 / sigma  # sensitivity / noise std

    def exact_delta(eps):
        return norm.cdf(ratio / 2 - eps / ratio) - math.exp(eps) * norm.cdf(-ratio / 2 - eps / ratio)

    low, high = 0.0, 50.0
    for _ in range(200):  # the exact ε at δ, by bisection on the decreasing δ(ε)
        mid = (low + high) / 2
        low, high = (mid, high) if exact_delta(mid) > delta else (low, mid)
    assert high <= epsilon <= 1.5 * high


def test_the_library_reproduces_a_published_dp_sgd_figure():
    """Abadi et al. (2016), Section 3.1: q = 0.01, σ = 4, 10 000 steps, δ = 10⁻⁵ give ε ≈ 1.26 with the moments
    accountant. The run accountant's Poisson rounds (the library's Rényi accountant, with its tighter conversion to
    (ε, δ)) must give a value at most that and not far below it."""
    assert 0.9 <= RunAccountant(1e-5, {(4.0, 0.01, POISSON): 10_000}).epsilon() <= 1.26


def test_adaptive_clipping_follows_its_geometric_rule():
    """σ = 0 and a negligible count noise: while every upload is below C, C shrinks by exp(−η_C(1 − γ)) per
    round; while every upload is clipped, it grows by exp(η_C γ) (Andrew et al., 2021)."""
    for start, factor in ((1e6, math.exp(-0.2 * 0.5)), (1e-9, math.exp(0.2 * 0.5))):
        strategy = run_inprocess({**PARTIAL, "dp": "server", "dp-noise": 0.0, "dp-clip": start,
                                  "dp-clip-mode": "adaptive", "dp-count-noise": 1e-12})  # fmt: skip
        assert strategy.stage(ServerPrivacy).clip == pytest.approx(
            start * factor ** PARTIAL["num-server-rounds"], rel=1e-9
        )


@pytest.mark.parametrize("mode", ["server", "clients"])
def test_a_private_run_resumes_bit_for_bit(mode, tmp_path):
    """The clip, the accountant's rounds and the noise streams survive a checkpoint: stopped and resumed equals
    uninterrupted (model, server state, client state, rows), with the reproducible noise (dp-noise-source='seeded';
    secret noise is fresh after a resume: tests/test_secret_noise.py)."""
    check_checkpoint_round_trip("scaffold", tmp_path, {"dp": mode, "dp-noise": 1.0, "dp-clip": 0.3,
                                                       "dp-clip-mode": "adaptive", "dp-count-noise": 2.0,
                                                       "dp-noise-source": "seeded"})  # fmt: skip


BAD = [
    ({"dp-noise": -1.0}, "dp-noise=-1.0: must be >= 0"),
    ({"dp-clip": 0.0}, "dp-clip=0.0: must be > 0"),
    ({"dp-delta": 1.0}, "dp-delta=1.0: must be in (0, 1)"),
    ({"dp-delta": 0.0}, "dp-delta=0.0: must be in (0, 1)"),
    ({"dp-target-epsilon": 0.5}, "dp-target-epsilon=0.5: one round already spends"),
    ({"weighting": "samples"}, "needs weighting='uniform'"),
    ({"local-steps": 0}, "needs local-steps > 0"),
    ({"sampling": "bernoulli"}, "dp='clients' needs sampling='fixed'"),
    (
        {"dp": "server", "sampling": "bernoulli", "algorithm": "feddyn", "dual-storage": "server"},
        "needs dual-storage='client'",
    ),
    ({"algorithm": "mimesvrg"}, "algorithm='mimesvrg' sends each client's full local gradient"),
    ({"dp-clip-mode": "adaptive", "dp-noise": 2.0}, "dp-count-noise=0.15 (0 = clients-per-round / 20): must exceed"),
]


@pytest.mark.parametrize(("change", "says"), BAD, ids=[next(iter(c)) for c, _ in BAD])
def test_bad_privacy_settings_are_refused_in_one_line(change, says):
    with pytest.raises(ConfigError) as err:
        resolve({**PARTIAL, "dp": "clients", **change})
    lines = [line.strip() for line in str(err.value).splitlines()[1:]]
    assert len(lines) == 1 and says in lines[0], lines


def test_buffers_the_server_would_average_are_refused_before_training():
    cfg = resolve({**PARTIAL, "dp": "server"})
    rule = type("Rule", (), {"query": None})()
    with pytest.raises(ConfigError, match="set buffers='local'"):
        server_privacy(cfg, rule, np.zeros(3, np.float32))
    assert server_privacy(resolve(PARTIAL), rule, np.zeros(3, np.float32)) is None  # dp off: nothing to refuse


def test_a_node_secret_changes_the_noise_shares_and_is_checked():
    """With a node config dp-noise-secret the share is drawn from a stream the run seed alone does not give (a
    server that knows the seed cannot subtract it); a malformed secret is refused in one line naming the key."""
    from fedsuite.node.app import NodeConfigError, noise_secret

    plain = noise_generator(0, 1, 2).normal(size=4)
    secret = noise_generator(0, 1, 2, noise_secret({"dp-noise-secret": "12345"})).normal(size=4)
    assert not np.array_equal(plain, secret)
    assert noise_secret({}) == 0
    with pytest.raises(NodeConfigError, match="node config dp-noise-secret: expected a decimal number"):
        noise_secret({"dp-noise-secret": "abc"})


def _released(algorithm: str) -> tuple[list[str], list[str]]:
    from fedsuite.registry import known as registry
    from fedsuite.rules.server_rule import RuleSettings
    from fedsuite.server.sampling import Sampler

    settings = RuleSettings(initial_x=np.zeros(1, np.float32), sampler=Sampler(10, "fixed", 1), lr=1.0)
    rule = registry.build_rule(resolve({"algorithm": algorithm}), settings)
    return list(rule.uplink), list(rule.uplink_some)


def test_the_privacy_pages_say_what_each_algorithm_releases():
    """docs/privacy.md's table and each algorithm page's Privacy section name exactly the arrays the algorithm's
    rule declares as uploaded, the client state its client half declares, and whether dp, dp-sgd and secagg allow
    it (each registry entry's refusal, word for word on the page)."""
    from pathlib import Path

    from fedsuite.registry import costs
    from fedsuite.registry import known as registry

    rows = {}
    for line in Path("docs/privacy.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in ALGORITHMS:
            rows[cells[0]] = cells
    assert set(rows) == set(ALGORITHMS)
    for name, algo in registry.ALGORITHMS.items():
        uplink, some = _released(name)
        _, released, kept, allowed, dp_sgd, secagg = rows[name]
        assert re.findall(r"`([^`]+)`", released) == uplink + some, name
        state = [spec.name for spec in costs.client_state(name)]
        if "block table" not in kept:
            assert re.findall(r"`([^`]+)`", kept) == state, name
        assert allowed.startswith("no" if algo.refusal("dp") else "yes"), name
        assert dp_sgd.startswith("no" if algo.refusal("dp-sgd") else "yes"), name
        assert secagg.startswith("no" if algo.refusal("secagg") else "yes"), name
        page = Path(algo.section).read_text()
        section = page.split("## Privacy", 1)[1].split("\n## ", 1)[0]
        assert all(f"`{array}`" in section for array in uplink + some) or algo.refusal("dp"), name
        said = " ".join(section.split())  # the page's DP-SGD and SecAgg+ sentences, unwrapped
        dp_sgd_said = said.split("[DP-SGD](../privacy-dp-sgd.md)", 1)[1].split("[SecAgg+]", 1)[0]
        secagg_said = said.split("[SecAgg+](../privacy-secagg.md)", 1)[1]
        assert (
            ("refused: " + algo.refusal("dp-sgd") in dp_sgd_said)
            if algo.refusal("dp-sgd")
            else "accepted" in dp_sgd_said
        )
        assert (
            ("refused: it " + algo.refusal("secagg") in secagg_said)
            if algo.refusal("secagg")
            else "accepted" in secagg_said
        )


class FixedDenominator(RoundObserver):
    """Checks every round of FedAvg under Poisson-sampled DP with σ = 0: x ← x + Σ_S clip(Δ_i) / (p·N), the sum over
    whoever replied divided by the expected cohort, never by |S|; an empty round leaves x as it was."""

    def __init__(self, expected: float):
        self.expected, self.rounds, self.empty = expected, 0, 0

    def aggregated(self, server_round, strategy, x_before, replies):
        moved = sum(r.arrays["delta"] for r in replies) / self.expected
        assert np.array_equal(strategy.rule.x, (x_before + moved).astype(np.float32))
        self.rounds += 1
        self.empty += all(r.partition_id < 0 for r in replies)


class EmptyRoundMoves(RoundObserver):
    """How far the model moved in each round that had no client's reply."""

    def __init__(self):
        self.norms: dict[int, float] = {}

    def aggregated(self, server_round, strategy, x_before, replies):
        if all(r.partition_id < 0 for r in replies):
            self.norms[server_round] = float(np.linalg.norm(strategy.rule.x - x_before))


def test_poisson_sampling_divides_by_the_expected_cohort_and_releases_noise_in_empty_rounds(tmp_path):
    """sampling='bernoulli' under dp='server': cohorts are true Poisson draws (an empty one is not drawn again), the
    mean divides by p·N, every round counts in the accountant as a Poisson-sampled Gaussian, and a round that drew
    nobody still moves the model by noise alone."""
    cfg = {**PARTIAL, "sampling": "bernoulli", "participation": 0.2, "num-server-rounds": 12, "dp": "server",
           "dp-clip": 0.05}  # fmt: skip
    check = FixedDenominator(0.2 * PARTIAL["num-clients"])
    run_inprocess({**cfg, "dp-noise": 0.0}, observers=[check])
    assert check.rounds == 12 and check.empty >= 2  # this seed draws empty cohorts: the test reaches them
    moves = EmptyRoundMoves()
    noisy = run_inprocess({**cfg, "dp-noise": 1.0, "out-dir": str(tmp_path), "run-name": "p"}, record=True,
                          observers=[moves])  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "p" / "rounds.jsonl").read_text().splitlines()][1:]
    empty = [r["round"] for r in rows if r["replies"] == 0]
    assert empty and sorted(moves.norms) == empty and all(norm > 0 for norm in moves.norms.values())
    assert noisy.stage(ServerPrivacy).accountant.rounds == {(1.0, 0.2, POISSON): 12}
    assert rows[-1]["dp_epsilon"] == pytest.approx(RunAccountant(1e-5, {(1.0, 0.2, POISSON): 12}).epsilon())


def test_a_run_that_spent_its_budget_ended_as_asked_for_the_launcher_and_the_studies(tmp_path, capsys):
    """budget-spent is an ending the run config asked for: the launcher's outcome accepts it (Flower says
    finished:completed), and a sweep averages such a run, exits 0 and reuses it on a rerun."""
    from simulation import sweep
    from simulation.launcher.outcome import outcome

    (tmp_path / "summary.json").write_text(json.dumps({"status": "budget-spent", "reason": "dp-target-epsilon"}))
    assert outcome(tmp_path, "1", "finished:completed") == tmp_path
    setting = ("dataset='synthetic-lsq' num-clients=6 clients-per-round=3 local-steps=3 num-server-rounds=12 "
               "dp='server' dp-noise=3.0 dp-clip=0.5 dp-target-epsilon=8.0")  # fmt: skip
    argv = ["--algorithms", "fedavg", "--seeds", "0", "-c", setting, "--engine", "inprocess", "--out",
            str(tmp_path / "sweep")]  # fmt: skip
    assert sweep.main(argv) == 0
    summary = json.loads((tmp_path / "sweep" / "runs" / "fedavg" / "default" / "seed-0" / "summary.json").read_text())
    assert summary["status"] == "budget-spent" and summary["rounds_completed"] < 12
    assert "| fedavg | default | 1/1 |" in (tmp_path / "sweep" / "sweep.md").read_text()
    capsys.readouterr()
    assert sweep.main(argv) == 0 and "1 ended earlier" in capsys.readouterr().out
