"""The app's own model and data: a small MLP on a synthetic 4-class problem, each partition's labels skewed."""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, TRAIN_PER_PARTITION = 10, 4, 200
APP_KEYS = ("results-dir", "state-dir")  # this app's own run-config keys; the others are fedsuite settings


def make_model() -> nn.Module:
    """The same initial model on the server and on every client (seeded, without touching the global RNG)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))


def _samples(n: int, label_weights: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    means = 1.5 * torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234))
    labels = torch.multinomial(label_weights, n, replacement=True, generator=gen)
    return means[labels] + torch.randn(n, FEATURES, generator=gen), labels


@lru_cache(maxsize=4)
def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """This partition's train and test loaders (cached: fedsuite.app then materialises them once per process)."""
    weights = torch.full((CLASSES,), 0.1)
    weights[partition_id % CLASSES] = 1.0  # label skew: one class dominates each partition
    x, y = _samples(TRAIN_PER_PARTITION + 50, weights, seed=partition_id)
    train = DataLoader(TensorDataset(x[:TRAIN_PER_PARTITION], y[:TRAIN_PER_PARTITION]), batch_size=20, shuffle=True)
    test = DataLoader(TensorDataset(x[TRAIN_PER_PARTITION:], y[TRAIN_PER_PARTITION:]), batch_size=50)
    return train, test


@lru_cache(maxsize=1)
def central_test_set() -> tuple[torch.Tensor, torch.Tensor]:
    return _samples(1000, torch.ones(CLASSES), seed=10_000)


def evaluate(model: nn.Module) -> dict[str, float]:
    """Central evaluation on a balanced test set (fedsuite calls it with the global model, in eval mode)."""
    x, y = central_test_set()
    out = model(x)
    return {"loss": float(F.cross_entropy(out, y)), "accuracy": float((out.argmax(1) == y).float().mean())}


def split_config(run_config) -> tuple[str, dict, dict]:
    """(algorithm, fedsuite settings, this app's keys) from Flower's run config."""
    settings = dict(run_config)
    own = {key: settings.pop(key) for key in APP_KEYS if key in settings}
    return str(settings.pop("algorithm")), settings, own


def state_dir(own: dict, run_id: int) -> Path:
    """A fresh client-state folder per run: a new run never starts from an earlier run's vectors."""
    root = Path(str(own.get("state-dir") or Path(tempfile.gettempdir()) / "fedsuite-flower-app"))
    return root / f"run-{run_id}"
