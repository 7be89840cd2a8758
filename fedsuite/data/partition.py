"""Client partitions of a labelled training set (docs/reference/protocol.md, Partitions), deterministic from the
run seed.

Each function returns one sorted int64 index array per client. Partitions are disjoint; IID, balanced
Dirichlet and shards give every client exactly floor(n/N) samples (the remainder is left out).
"""

from __future__ import annotations

import logging
import warnings

import numpy as np


def _rng(seed: int, tag: str) -> np.random.Generator:
    return np.random.default_rng([seed, *tag.encode()])


def iid(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """Shuffle with the run seed, split into N equal contiguous parts."""
    per = len(labels) // num_clients
    order = _rng(seed, "iid").permutation(len(labels))[: per * num_clients]
    return [np.sort(part) for part in order.reshape(num_clients, per)]


def dirichlet_balanced(labels: np.ndarray, num_clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """FedDyn's label-prior routine: equal sizes n/N, class priors q_i ~ Dir(α·1_C).

    Until every slot is filled: pick a uniformly random client with free slots, draw a class c ~ q_i; an
    exhausted class is redrawn, i.e. c is drawn from q_i restricted to classes with samples left; assign one
    unassigned sample of c. No sample is assigned twice (FL-Simulator's refill bug is not reproduced).
    """
    rng = _rng(seed, "dirichlet-balanced")
    classes, y = np.unique(labels, return_inverse=True)
    per = len(labels) // num_clients
    priors = rng.dirichlet(alpha * np.ones(len(classes)), size=num_clients)
    pools = [rng.permutation(np.flatnonzero(y == c)) for c in range(len(classes))]
    left = np.array([len(p) for p in pools])
    taken = np.zeros(len(classes), dtype=np.int64)
    free = np.full(num_clients, per)
    open_clients = list(range(num_clients))
    out: list[list[int]] = [[] for _ in range(num_clients)]
    uniforms = rng.random(2 * per * num_clients)
    for step in range(per * num_clients):
        pos = int(uniforms[2 * step] * len(open_clients))
        i = open_clients[pos]
        weights = priors[i] * (left > 0)
        total = weights.sum()
        if total <= 0.0:  # the prior's mass sits on exhausted classes only (tiny α): uniform over the rest
            weights, total = (left > 0).astype(float), float((left > 0).sum())
        c = int(np.searchsorted(np.cumsum(weights), uniforms[2 * step + 1] * total, side="right"))
        c = min(c, len(classes) - 1)
        out[i].append(int(pools[c][taken[c]]))
        taken[c] += 1
        left[c] -= 1
        free[i] -= 1
        if free[i] == 0:
            open_clients[pos] = open_clients[-1]
            open_clients.pop()
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in out]


def dirichlet_unbalanced(
    labels: np.ndarray, num_clients: int, alpha: float, seed: int, min_size: int = 10
) -> list[np.ndarray]:
    """Per-class split: p_c ~ Dir(α·1_N) over clients, redrawn (up to 10 times) until every client has
    >= min_size samples; a clear ValueError when α is too small for that.

    flwr-datasets' DirichletPartitioner does exactly this split; it walks each class in dataset order, so
    the rows are handed to it in a seeded random order to split *shuffled* class indices
    (docs/reference/protocol.md, Partitions).
    """
    import datasets
    from flwr_datasets.partitioner import DirichletPartitioner

    order = _rng(seed, "dirichlet-unbalanced").permutation(len(labels))
    table = datasets.Dataset.from_dict({"idx": order, "label": np.asarray(labels)[order].astype(np.int64)})
    part = DirichletPartitioner(
        num_partitions=num_clients,
        partition_by="label",
        alpha=alpha,
        min_partition_size=min_size,
        self_balancing=False,
        shuffle=False,
        seed=seed,
    )
    part.dataset = table
    try:
        with warnings.catch_warnings(record=True) as redraws:  # one warning per redraw, each listing N alphas
            warnings.simplefilter("always")
            parts = [np.sort(np.asarray(part.load_partition(i)["idx"], dtype=np.int64)) for i in range(num_clients)]
        if redraws:
            logging.getLogger("flwr.fedsuite").info(
                "fedsuite │ unbalanced Dirichlet α=%g: %d redraw(s) until every client had ≥ %d samples",
                alpha, len(redraws), min_size,
            )  # fmt: skip
        return parts
    except ValueError as err:  # flwr-datasets gives up after 10 draws
        raise ValueError(
            f"partition-alpha={alpha:g} with partition-balanced=false: 10 per-class Dirichlet draws over "
            f"{num_clients} clients all left a client with fewer than {min_size} samples; raise partition-alpha "
            "or use partition-balanced=true"
        ) from err


def shards(labels: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """LoSAC non-IID: stable sort by label, N equal contiguous shards."""
    per = len(labels) // num_clients
    order = np.argsort(labels, kind="stable")[: per * num_clients]
    return [np.sort(part) for part in order.reshape(num_clients, per)]


def mixture(labels: np.ndarray, num_clients: int, share: float, seed: int) -> list[np.ndarray]:
    """LoSAC c % mixture: shuffle; the first (1−c)·n samples split IID equally, the remaining c·n sorted by
    label into N contiguous shards; each client owns the union of its two parts."""
    order = _rng(seed, "mixture").permutation(len(labels))
    n_iid = int(round((1.0 - share) * len(labels)))
    iid_part, sorted_part = order[:n_iid], order[n_iid:]
    sorted_part = sorted_part[np.argsort(labels[sorted_part], kind="stable")]
    a, b = n_iid // num_clients, len(sorted_part) // num_clients
    return [
        np.sort(np.concatenate([iid_part[i * a : (i + 1) * a], sorted_part[i * b : (i + 1) * b]]))
        for i in range(num_clients)
    ]


def natural(groups: np.ndarray) -> list[np.ndarray]:
    """One client per distinct value of `groups` (one value per training sample), in sorted value order."""
    values, inverse = np.unique(np.asarray(groups), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return [np.sort(part) for part in np.split(order, np.cumsum(np.bincount(inverse, minlength=len(values)))[:-1])]


def make_partition(
    labels: np.ndarray,
    scheme: str,
    num_clients: int,
    seed: int,
    alpha: float = 0.3,
    balanced: bool = True,
    share: float = 0.5,
) -> list[np.ndarray]:
    labels = np.asarray(labels)
    if num_clients > len(labels):
        raise ValueError(f"num-clients={num_clients}: more clients than the {len(labels)} training samples")
    if scheme == "iid":
        return iid(labels, num_clients, seed)
    if scheme == "dirichlet":
        if balanced:
            return dirichlet_balanced(labels, num_clients, alpha, seed)
        return dirichlet_unbalanced(labels, num_clients, alpha, seed)
    if scheme == "shards":
        return shards(labels, num_clients)
    if scheme == "mixture":
        return mixture(labels, num_clients, share, seed)
    if scheme == "natural":
        raise ValueError("partition='natural' is made from the data's partition-column (fedsuite.data.natural)")
    raise ValueError(f"partition={scheme!r}: allowed values are iid, dirichlet, shards, mixture, natural")
