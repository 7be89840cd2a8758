"""fedsuite/server/sampling.py: per-round cohorts are a pure function of (seed, round, N, mode, S or p)."""

import numpy as np
import pytest

from fedsuite.server.sampling import Sampler


@pytest.mark.parametrize("num_clients, per_round", [(100, 10), (10, 10), (7, 1), (1000, 37)])
def test_fixed_returns_distinct_sorted_ids_in_range(num_clients, per_round):
    sampler = Sampler(num_clients, "fixed", clients_per_round=per_round, seed=3)
    for rnd in range(1, 30):
        cohort = sampler.cohort(rnd)
        assert len(cohort) == per_round
        assert len(set(cohort)) == per_round
        assert cohort == sorted(cohort)
        assert all(type(i) is int for i in cohort)
        assert all(0 <= i < num_clients for i in cohort)


def test_fixed_full_participation_is_everyone():
    assert Sampler(12, "fixed", clients_per_round=12).cohort(4) == list(range(12))


def test_fixed_same_seed_and_round_same_cohort_rounds_differ():
    sampler = Sampler(100, "fixed", clients_per_round=10, seed=0)
    assert sampler.cohort(5) == sampler.cohort(5)
    cohorts = [tuple(sampler.cohort(r)) for r in range(1, 21)]
    assert len(set(cohorts)) == 20, "20 rounds of 10-of-100 should give 20 different cohorts"
    assert Sampler(100, "fixed", clients_per_round=10, seed=1).cohort(5) != sampler.cohort(5)


def test_fixed_cohorts_cover_every_client_over_many_rounds():
    sampler = Sampler(50, "fixed", clients_per_round=5, seed=2)
    counts = np.bincount(np.concatenate([sampler.cohort(r) for r in range(1000)]), minlength=50)
    assert counts.min() > 0
    # each client is picked with probability S/N = 0.1 per round: about 100 times in 1000 rounds
    assert abs(counts.mean() - 100) < 1e-9 and counts.max() < 150 and counts.min() > 55


def test_cohort_depends_only_on_seed_round_n_mode_and_its_own_size_parameter():
    # fixed mode ignores participation; bernoulli ignores clients_per_round
    a = Sampler(100, "fixed", clients_per_round=10, participation=0.1, seed=7)
    b = Sampler(100, "fixed", clients_per_round=10, participation=0.9, seed=7)
    c = Sampler(100, "bernoulli", clients_per_round=10, participation=0.2, seed=7)
    d = Sampler(100, "bernoulli", clients_per_round=55, participation=0.2, seed=7)
    # query in different orders: no hidden state carries from one call to the next
    a_cohorts = [a.cohort(r) for r in range(1, 11)]
    b_cohorts = [b.cohort(r) for r in reversed(range(1, 11))][::-1]
    assert a_cohorts == b_cohorts
    c_cohorts = [c.cohort(r) for r in range(1, 11)]
    d_by_round = {r: d.cohort(r) for r in (3, 10, 1, 7, 2, 4, 9, 5, 6, 8)}
    assert c_cohorts == [d_by_round[r] for r in range(1, 11)]
    # ... and the global numpy rng plays no part
    np.random.seed(123)
    assert a.cohort(4) == a_cohorts[3]
    np.random.seed(456)
    assert c.cohort(4) == c_cohorts[3]


def test_each_parameter_that_matters_changes_the_cohort():
    base = Sampler(100, "fixed", clients_per_round=10, seed=7).cohort(3)
    assert Sampler(100, "fixed", clients_per_round=10, seed=8).cohort(3) != base
    assert Sampler(100, "fixed", clients_per_round=10, seed=7).cohort(4) != base
    assert Sampler(101, "fixed", clients_per_round=10, seed=7).cohort(3) != base
    assert len(Sampler(100, "fixed", clients_per_round=11, seed=7).cohort(3)) == 11
    bern = Sampler(100, "bernoulli", participation=0.1, seed=7)
    assert bern.cohort(3) != base
    assert len(Sampler(100, "bernoulli", participation=0.5, seed=7).cohort(3)) > len(bern.cohort(3))


@pytest.mark.parametrize("num_clients, p", [(100, 0.1), (50, 0.3), (20, 0.5)])
def test_bernoulli_mean_cohort_size_is_p_times_n(num_clients, p):
    sampler = Sampler(num_clients, "bernoulli", participation=p, seed=0)
    sizes = []
    for rnd in range(2000):
        cohort = sampler.cohort(rnd)
        assert cohort == sorted(set(cohort))
        assert all(0 <= i < num_clients for i in cohort)
        sizes.append(len(cohort))
    sizes = np.array(sizes)
    assert abs(sizes.mean() - p * num_clients) < 0.05 * p * num_clients
    assert sizes.std() > 0  # sizes vary from round to round, unlike fixed mode


def test_bernoulli_never_empty_with_tiny_participation():
    sampler = Sampler(10, "bernoulli", participation=0.001, seed=0)
    cohorts = [sampler.cohort(r) for r in range(60)]
    assert all(len(c) >= 1 for c in cohorts)
    assert all(0 <= i < 10 for c in cohorts for i in c)
    # with p = 0.001 a non-empty draw almost always holds exactly one client
    assert np.mean([len(c) == 1 for c in cohorts]) > 0.9
    # the redraw is deterministic too
    assert [sampler.cohort(r) for r in range(60)] == cohorts
    assert len({tuple(c) for c in cohorts}) > 1


def test_bernoulli_deterministic_per_seed_and_round():
    s0 = Sampler(100, "bernoulli", participation=0.1, seed=0)
    assert s0.cohort(9) == Sampler(100, "bernoulli", participation=0.1, seed=0).cohort(9)
    assert s0.cohort(9) != s0.cohort(10)
    assert s0.cohort(9) != Sampler(100, "bernoulli", participation=0.1, seed=1).cohort(9)


def test_bernoulli_full_participation_is_everyone():
    assert Sampler(9, "bernoulli", participation=1.0).cohort(2) == list(range(9))


@pytest.mark.parametrize("mode", ["random", "Fixed", "", "uniform"])
def test_invalid_mode_raises_value_error(mode):
    with pytest.raises(ValueError, match="sampling=") as exc:
        Sampler(10, mode).cohort(1)
    assert repr(mode) in str(exc.value)
    assert "fixed" in str(exc.value) and "bernoulli" in str(exc.value)
