"""fedsuite/data/partition.py: determinism, disjointness, sizes, coverage and label skew of every scheme."""

import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from fedsuite.data import partition as P

NUM_CLASSES = 10
PER_CLASS = 300
N_SAMPLES = NUM_CLASSES * PER_CLASS

# flwr-datasets warns on every Dirichlet redraw that misses min_partition_size; the redraw is the point.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def labels():
    """10 balanced classes x 300 samples, shuffled with a fixed rng."""
    return np.random.default_rng(1234).permutation(np.repeat(np.arange(NUM_CLASSES), PER_CLASS))


def _all_schemes(labels, num_clients, seed):
    """Every scheme's partition, by name."""
    return {
        "iid": P.iid(labels, num_clients, seed),
        "dirichlet-balanced": P.dirichlet_balanced(labels, num_clients, 0.3, seed),
        "dirichlet-unbalanced": P.dirichlet_unbalanced(labels, num_clients, 0.3, seed),
        "shards": P.shards(labels, num_clients),
        "mixture": P.mixture(labels, num_clients, 0.5, seed),
    }


def _assert_disjoint_in_range(parts, n):
    union = np.concatenate(parts)
    assert union.dtype == np.int64
    assert len(np.unique(union)) == len(union), "an index is held by two clients (or twice by one)"
    assert union.min() >= 0 and union.max() < n
    for p in parts:
        assert np.all(np.diff(p) > 0), "each client's indices are sorted and unique"


def _max_class_share(labels, parts):
    return float(np.mean([np.bincount(labels[p], minlength=NUM_CLASSES).max() / len(p) for p in parts]))


def _distinct_classes(labels, parts):
    return float(np.mean([len(np.unique(labels[p])) for p in parts]))


# --- determinism -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda y, s: P.iid(y, 10, s),
        lambda y, s: P.dirichlet_balanced(y, 10, 0.3, s),
        lambda y, s: P.dirichlet_unbalanced(y, 10, 0.3, s),
        lambda y, s: P.mixture(y, 10, 0.5, s),
        lambda y, s: P.make_partition(y, "dirichlet", 10, s, alpha=0.5, balanced=True),
    ],
    ids=["iid", "dirichlet-balanced", "dirichlet-unbalanced", "mixture", "make_partition"],
)
def test_same_seed_same_partition_different_seed_different(labels, fn):
    a, b, c = fn(labels, 0), fn(labels, 0), fn(labels, 1)
    assert len(a) == len(b) == len(c) == 10
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(len(x) != len(z) or not np.array_equal(x, z) for x, z in zip(a, c, strict=True))


def test_shards_is_seed_free_and_deterministic(labels):
    a = P.shards(labels, 10)
    b = P.make_partition(labels, "shards", 10, seed=0)
    c = P.make_partition(labels, "shards", 10, seed=99)
    for x, y, z in zip(a, b, c, strict=True):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)


def test_partition_does_not_depend_on_call_order(labels):
    first = P.dirichlet_balanced(labels, 10, 0.3, 5)
    P.iid(labels, 10, 5)
    P.mixture(labels, 10, 0.5, 7)
    np.random.seed(0)  # the global numpy rng must not matter either
    again = P.dirichlet_balanced(labels, 10, 0.3, 5)
    for x, y in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, y)


# --- disjointness, sizes, coverage ---------------------------------------------------------------------------


@pytest.mark.parametrize("num_clients", [7, 10, 30])
def test_every_scheme_disjoint_and_in_range(labels, num_clients):
    for name, parts in _all_schemes(labels, num_clients, seed=3).items():
        assert len(parts) == num_clients, name
        _assert_disjoint_in_range(parts, N_SAMPLES)


@pytest.mark.parametrize("num_clients", [7, 10, 30, 64])
def test_equal_size_schemes_give_floor_n_over_N_and_cover_all_but_remainder(labels, num_clients):
    per = N_SAMPLES // num_clients
    schemes = {
        "iid": P.iid(labels, num_clients, 0),
        "dirichlet-balanced": P.dirichlet_balanced(labels, num_clients, 0.3, 0),
        "shards": P.shards(labels, num_clients),
    }
    for name, parts in schemes.items():
        assert [len(p) for p in parts] == [per] * num_clients, name
        covered = len(np.unique(np.concatenate(parts)))
        assert covered == per * num_clients == N_SAMPLES - N_SAMPLES % num_clients, name


def test_dirichlet_balanced_with_unequal_classes_still_fills_every_slot():
    # a class far too small for the clients whose prior favours it forces the "exhausted class" path
    y = np.random.default_rng(0).permutation(np.concatenate([np.zeros(20), np.ones(500), np.full(480, 2)]).astype(int))
    parts = P.dirichlet_balanced(y, 10, 0.01, 0)
    assert [len(p) for p in parts] == [100] * 10
    _assert_disjoint_in_range(parts, len(y))
    assert np.bincount(y[np.concatenate(parts)], minlength=3).tolist() == [20, 500, 480]


def test_dirichlet_balanced_with_non_contiguous_labels():
    y = np.random.default_rng(0).permutation(np.repeat([3, 7, 42], 100))
    parts = P.dirichlet_balanced(y, 6, 0.5, 0)
    assert [len(p) for p in parts] == [50] * 6
    _assert_disjoint_in_range(parts, len(y))
    assert set(np.unique(y[np.concatenate(parts)])) <= {3, 7, 42}


def test_iid_clients_see_mixed_labels(labels):
    parts = P.iid(labels, 10, 0)
    assert _distinct_classes(labels, parts) == NUM_CLASSES
    assert _max_class_share(labels, parts) < 0.2


# --- Dirichlet label skew ------------------------------------------------------------------------------------


def test_dirichlet_balanced_skew_grows_as_alpha_shrinks(labels):
    skewed = P.dirichlet_balanced(labels, 20, 0.05, 0)
    mild = P.dirichlet_balanced(labels, 20, 1.0, 0)
    near_iid = P.dirichlet_balanced(labels, 20, 100.0, 0)
    s_skewed, s_mild, s_iid = (_max_class_share(labels, p) for p in (skewed, mild, near_iid))
    assert s_skewed > s_mild > s_iid
    assert s_skewed > 0.4 and s_iid < 0.2
    assert _distinct_classes(labels, skewed) < 6 < _distinct_classes(labels, near_iid) == NUM_CLASSES


def test_dirichlet_unbalanced_skew_grows_as_alpha_shrinks(labels):
    skewed = P.dirichlet_unbalanced(labels, 10, 0.05, 0)
    near_iid = P.dirichlet_unbalanced(labels, 10, 100.0, 0)
    s_skewed, s_iid = _max_class_share(labels, skewed), _max_class_share(labels, near_iid)
    assert s_skewed > 0.4 and s_iid < 0.2
    assert _distinct_classes(labels, skewed) < 6 < _distinct_classes(labels, near_iid) == NUM_CLASSES


def test_dirichlet_unbalanced_min_size_unequal_sizes_and_full_coverage(labels):
    for seed in (0, 1):
        parts = P.dirichlet_unbalanced(labels, 10, 0.05, seed)
        sizes = [len(p) for p in parts]
        assert min(sizes) >= 10
        assert max(sizes) > 2 * min(sizes), f"sizes should be unequal, got {sizes}"
        _assert_disjoint_in_range(parts, N_SAMPLES)
        # the per-class split hands out every sample
        assert sum(sizes) == N_SAMPLES


def test_dirichlet_unbalanced_via_make_partition(labels):
    a = P.make_partition(labels, "dirichlet", 10, 4, alpha=0.3, balanced=False)
    b = P.dirichlet_unbalanced(labels, 10, 0.3, 4)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert len({len(p) for p in a}) > 1


def test_dirichlet_unbalanced_infeasible_alpha_gives_a_clear_error(labels):
    """α = 0.05 over 20 clients puts each class on one or two clients: no redraw gives everyone 10 samples."""
    with pytest.raises(ValueError, match=r"partition-alpha=0.05.*partition-balanced=true"):
        P.dirichlet_unbalanced(labels, 20, 0.05, 0)


# --- shards ------------------------------------------------------------------------------------------------


def test_shards_one_class_per_client_with_ten_balanced_classes(labels):
    parts = P.shards(labels, 10)
    held = [set(np.unique(labels[p]).tolist()) for p in parts]
    assert all(len(h) == 1 for h in held)
    assert sorted(next(iter(h)) for h in held) == list(range(NUM_CLASSES))


def test_shards_mostly_one_class_with_more_clients(labels):
    parts = P.shards(labels, 20)
    # two shards per class: each client holds exactly one class
    assert _max_class_share(labels, parts) == 1.0
    parts = P.shards(labels, 7)  # 428 per shard crosses class borders: at most three classes each
    assert all(len(np.unique(labels[p])) <= 3 for p in parts)
    # label-sorted: every client's classes come after the previous client's
    for left, right in zip(parts, parts[1:], strict=False):
        assert labels[left].max() <= labels[right].min()
    assert _distinct_classes(labels, parts) < 3


# --- mixture -----------------------------------------------------------------------------------------------


def test_mixture_share_zero_is_an_equal_iid_split(labels):
    parts = P.mixture(labels, 10, 0.0, 0)
    assert [len(p) for p in parts] == [N_SAMPLES // 10] * 10
    _assert_disjoint_in_range(parts, N_SAMPLES)
    assert _distinct_classes(labels, parts) == NUM_CLASSES
    assert _max_class_share(labels, parts) < 0.2


def test_mixture_share_one_is_label_sorted_shards(labels):
    parts = P.mixture(labels, 10, 1.0, 0)
    assert [len(p) for p in parts] == [N_SAMPLES // 10] * 10
    _assert_disjoint_in_range(parts, N_SAMPLES)
    # client i holds exactly class i (sorted by label, contiguous shards)
    for i, p in enumerate(parts):
        assert set(labels[p].tolist()) == {i}


@pytest.mark.parametrize("num_clients, share", [(10, 0.5), (7, 0.5), (10, 0.2), (13, 0.8)])
def test_mixture_union_sizes(labels, num_clients, share):
    parts = P.mixture(labels, num_clients, share, 0)
    n_iid = int(round((1 - share) * N_SAMPLES))
    per = n_iid // num_clients + (N_SAMPLES - n_iid) // num_clients
    assert [len(p) for p in parts] == [per] * num_clients
    _assert_disjoint_in_range(parts, N_SAMPLES)
    assert len(np.unique(np.concatenate(parts))) == per * num_clients


def test_mixture_skew_between_iid_and_shards(labels):
    s0 = _max_class_share(labels, P.mixture(labels, 10, 0.0, 0))
    s5 = _max_class_share(labels, P.mixture(labels, 10, 0.5, 0))
    s1 = _max_class_share(labels, P.mixture(labels, 10, 1.0, 0))
    assert s0 < s5 < s1 == 1.0
    # half of each client's data is one class, the other half IID
    assert 0.5 < s5 < 0.65


# --- make_partition dispatch and errors ----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards", "mixture"])
def test_make_partition_dispatches(labels, scheme):
    expected = {
        "iid": P.iid(labels, 10, 2),
        "dirichlet": P.dirichlet_balanced(labels, 10, 0.7, 2),
        "shards": P.shards(labels, 10),
        "mixture": P.mixture(labels, 10, 0.3, 2),
    }[scheme]
    got = P.make_partition(list(labels), scheme, 10, 2, alpha=0.7, balanced=True, share=0.3)
    for x, y in zip(got, expected, strict=True):
        np.testing.assert_array_equal(x, y)


def test_make_partition_unknown_scheme_names_it(labels):
    with pytest.raises(ValueError, match="'dirichlet-ish'") as exc:
        P.make_partition(labels, "dirichlet-ish", 10, 0)
    assert "iid" in str(exc.value) and "mixture" in str(exc.value)


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards", "mixture"])
def test_make_partition_more_clients_than_samples_raises(scheme):
    y = np.arange(5) % 2
    with pytest.raises(ValueError, match="num-clients=6"):
        P.make_partition(y, scheme, 6, 0)
    assert len(P.make_partition(y, "iid", 5, 0)) == 5  # exactly n clients is allowed


# --- real Fashion-MNIST --------------------------------------------------------------------------------------


def test_fashion_mnist_balanced_dirichlet_100_clients():
    if not Path("/usr/share/datasets/fashion-mnist").is_dir():
        pytest.skip("Fashion-MNIST not installed at /usr/share/datasets/fashion-mnist")
    from fedsuite.data.datasets import load_fashion_mnist

    y = load_fashion_mnist().train.y.numpy()
    assert len(y) == 60000
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent numpy trouble
        start = time.perf_counter()
        parts = P.make_partition(y, "dirichlet", 100, 0, alpha=0.3, balanced=True)
        elapsed = time.perf_counter() - start
    assert elapsed < 10.0, f"balanced Dirichlet over 60k samples took {elapsed:.1f} s"
    assert [len(p) for p in parts] == [600] * 100
    _assert_disjoint_in_range(parts, 60000)
    assert len(np.unique(np.concatenate(parts))) == 60000
    assert _max_class_share(y, parts) > 0.3  # α=0.3 is visibly non-IID


def test_unbalanced_dirichlet_redraws_are_one_log_line_not_warnings(caplog):
    """flwr-datasets warns once per redraw with every client's alpha listed; the console gets one short line."""
    import logging

    labels = np.repeat(np.arange(10), 300)
    with warnings.catch_warnings(record=True) as leaked, caplog.at_level(logging.INFO, logger="flwr.fedsuite"):
        warnings.simplefilter("always")
        parts = P.dirichlet_unbalanced(labels, 50, 0.3, 0)
    assert not leaked and min(len(p) for p in parts) >= 10
    assert [r.message for r in caplog.records] == [
        "fedsuite │ unbalanced Dirichlet α=0.3: 1 redraw(s) until every client had ≥ 10 samples"
    ]
