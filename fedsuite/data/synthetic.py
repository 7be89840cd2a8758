"""Heterogeneous synthetic federations with a known optimum x* (least squares: closed form; logistic: Newton).

Client i owns (A_i, b_i) drawn around its own optimum x_i = x_c + h·u_i with per-coordinate feature scales
exp(h·v_i/2), so both the local optima and the local curvatures differ: the setting where FedAvg drifts.
Local loss F_i(x) = (1/2n)‖A_i x − b_i‖² (lsq) or mean logistic loss (logistic); the global objective is
f(x) = mean_i F_i(x) + (wd/2)‖x‖², the quantity every local step descends when weight decay wd is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from fedsuite.data.datasets import Split


@dataclass
class SyntheticFederation:
    name: str
    task: str  # "regression" (lsq) or "binary" (logistic)
    features_x: np.ndarray  # float64, (N·n)×d
    targets: np.ndarray  # float64, N·n
    client_parts: list[np.ndarray]
    weight_decay: float
    x_star: np.ndarray
    f_star: float
    crop_pad: int = 0

    @property
    def num_classes(self) -> int:
        return 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.features_x.shape[1],)

    @cached_property
    def train(self) -> Split:
        return Split(
            torch.from_numpy(self.features_x.astype(np.float32)), torch.from_numpy(self.targets.astype(np.float32))
        )

    @property
    def test(self) -> Split:  # the global objective is measured on the union of client data
        return self.train

    def features(self, split: Split, idx: np.ndarray | None = None, device: str = "cpu") -> torch.Tensor:
        x = split.x if idx is None else split.x[torch.as_tensor(idx, dtype=torch.long)]
        return x.to(device)

    def objective(self, x: np.ndarray) -> float:
        """f(x) = mean_i F_i(x) + (wd/2)‖x‖² in float64 (clients hold equal sample counts)."""
        return _objective(self.task, self.features_x, self.targets, np.asarray(x, np.float64), self.weight_decay)

    def relative_error(self, x: np.ndarray) -> float:
        return float(np.linalg.norm(np.asarray(x, np.float64) - self.x_star) / max(np.linalg.norm(self.x_star), 1e-300))


def _objective(task: str, a: np.ndarray, b: np.ndarray, x: np.ndarray, wd: float) -> float:
    z = a @ x
    if task == "regression":
        loss = 0.5 * np.mean((z - b) ** 2)
    else:
        loss = np.mean(np.logaddexp(0.0, z) - b * z)
    return float(loss + 0.5 * wd * x @ x)


def make_federation(
    kind: str,
    num_clients: int,
    samples: int,
    dim: int,
    heterogeneity: float,
    noise: float,
    weight_decay: float,
    seed: int,
) -> SyntheticFederation:
    if kind not in ("lsq", "logistic"):
        raise ValueError(f"synthetic federation kind={kind!r}: allowed are lsq, logistic")
    rng = np.random.default_rng([seed, 0x5EED])
    centre = rng.normal(size=dim)
    parts_a, parts_b = [], []
    for _ in range(num_clients):
        x_i = centre + heterogeneity * rng.normal(size=dim)
        scale = np.exp(0.5 * heterogeneity * rng.normal(size=dim))
        a = rng.normal(size=(samples, dim)) * scale
        if kind == "lsq":
            b = a @ x_i + noise * rng.normal(size=samples)
        else:
            a = a / np.sqrt(dim)
            p = 1.0 / (1.0 + np.exp(-(a @ x_i + noise * rng.normal(size=samples))))
            b = (rng.random(samples) < p).astype(np.float64)
        parts_a.append(a)
        parts_b.append(b)
    a_all, b_all = np.concatenate(parts_a), np.concatenate(parts_b)
    parts = [np.arange(i * samples, (i + 1) * samples) for i in range(num_clients)]
    task = "regression" if kind == "lsq" else "binary"
    x_star = (
        _lsq_optimum(a_all, b_all, weight_decay) if kind == "lsq" else _logistic_optimum(a_all, b_all, weight_decay)
    )
    f_star = _objective(task, a_all, b_all, x_star, weight_decay)
    return SyntheticFederation(f"synthetic-{kind}", task, a_all, b_all, parts, weight_decay, x_star, f_star)


def make_lowrank(
    num_clients: int, samples: int, size: int, rank: int, noise: float, weight_decay: float, seed: int
) -> SyntheticFederation:
    """The LoSAC paper's low-rank matrix estimation (§V-E; docs/lowrank/index.md): X_G = diag(I_r, 0) (size × size),
    samples D_j with i.i.d. N(0.1, 1) entries, y_j = ⟨X_G, D_j⟩ + noise·N(0, 1), the same law on every client.
    Local loss (1/2n)Σ_j (⟨X, D_j⟩ − y_j)². `x_star` is the ground truth X_G (not the penalised optimum), so
    relative_error = ‖X − X_G‖_F / ‖X_G‖_F and objective_gap is measured against f(X_G)."""
    rng = np.random.default_rng([seed, 0x10AA])
    truth = np.zeros((size, size))
    truth[np.arange(rank), np.arange(rank)] = 1.0
    n = num_clients * samples
    a = rng.normal(0.1, 1.0, size=(n, size * size)).astype(np.float32).astype(np.float64)
    b = a @ truth.ravel() + noise * rng.normal(size=n)
    parts = [np.arange(i * samples, (i + 1) * samples) for i in range(num_clients)]
    x_star = truth.ravel()
    f_star = _objective("regression", a, b, x_star, weight_decay)
    return SyntheticFederation("synthetic-lowrank", "regression", a, b, parts, weight_decay, x_star, f_star)


def _lsq_optimum(a: np.ndarray, b: np.ndarray, wd: float) -> np.ndarray:
    n, d = a.shape
    return np.linalg.solve(a.T @ a / n + wd * np.eye(d), a.T @ b / n)


def _logistic_optimum(a: np.ndarray, b: np.ndarray, wd: float, iters: int = 100) -> np.ndarray:
    """Damped Newton on mean logistic loss + (wd/2)‖x‖², to gradient norm ~1e-14."""
    n, d = a.shape
    x = np.zeros(d)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(a @ x)))
        grad = a.T @ (p - b) / n + wd * x
        if np.linalg.norm(grad) < 1e-14:
            break
        hess = (a * (p * (1 - p))[:, None]).T @ a / n + (wd + 1e-12) * np.eye(d)
        step = np.linalg.solve(hess, grad)
        t, f0 = 1.0, _objective("binary", a, b, x, wd)
        while _objective("binary", a, b, x - t * step, wd) > f0 - 0.25 * t * grad @ step and t > 1e-10:
            t *= 0.5
        x = x - t * step
    return x
