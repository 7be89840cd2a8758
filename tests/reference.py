"""Independent float64 numpy implementations of the drift-correction family on a full-batch least-squares federation,
written from the algorithm pages (docs/algorithms/) alone (no fedsuite code beyond the cohort sampler and the data).

F_i(x) = (1/2n)‖A_i x − b_i‖²; every local step adds weight decay wd·x; lr of round t is lr·γ^t.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsuite.config.run_config import resolve
from fedsuite.data import load_dataset
from fedsuite.models.networks import initial_vector
from fedsuite.server.sampling import Sampler


def grad(a, b, x):
    return a.T @ (a @ x - b) / len(b)


def sam_grad(a, b, x, rho, eps, mix=1.0):
    """(1 − mix)·g1 + mix·g2, g2 at the normalised ascent point (FedSpeed's g̃; mix = 1 is plain SAM)."""
    g1 = grad(a, b, x)
    return (1 - mix) * g1 + mix * grad(a, b, x + rho * g1 / (np.linalg.norm(g1) + eps))


class Federation:
    def __init__(self, run_config: dict):
        self.cfg = resolve(run_config)
        fed = load_dataset(self.cfg)
        self.clients = [(fed.features_x[p], fed.targets[p]) for p in fed.client_parts]
        self.n = len(self.clients)
        self.x0 = initial_vector("linear", fed.input_shape, 1, fed.task, int(self.cfg["seed"])).double().numpy()
        self.sampler = Sampler(self.n, str(self.cfg["sampling"]), int(self.cfg["clients-per-round"]),
                               float(self.cfg["participation"]), int(self.cfg["seed"]))  # fmt: skip
        self.k = int(self.cfg["local-steps"])
        self.epochs, self.batch = int(self.cfg["local-epochs"]), int(self.cfg["batch-size"])
        self.wd = float(self.cfg["weight-decay"])
        self.rounds = int(self.cfg["num-server-rounds"])
        self.server_lr = float(self.cfg["server-lr"])
        self.by_samples = self.cfg["weighting"] == "samples"
        self.round = 0  # the 1-based round being simulated (for the minibatch replay)

    def lr(self, t: int) -> float:
        self.round = t + 1
        return float(self.cfg["lr"]) * float(self.cfg["lr-decay"]) ** t

    def batches(self, i: int) -> list[np.ndarray | None]:
        """The row indices of client i's minibatches this round (None = all rows). The data order is replayed from
        fedsuite's recipe (a generator seeded by (seed, round, partition); randperm per step or per epoch); the
        number of steps is K_i = K, or E·ceil(n_i/B) in epoch mode (docs/reference/protocol.md)."""
        n = len(self.clients[i][1])
        b = n if self.batch <= 0 else min(self.batch, n)
        seed = np.random.SeedSequence([int(self.cfg["seed"]), self.round, i]).generate_state(1)[0]
        gen = torch.Generator().manual_seed(int(seed))
        if self.k > 0:
            return [torch.randperm(n, generator=gen)[:b].numpy() if b < n else None for _ in range(self.k)]
        out = []
        for _ in range(self.epochs):
            perm = torch.randperm(n, generator=gen).numpy() if b < n else None
            out += [None if perm is None else perm[s : s + b] for s in range(0, n, b)]
        return out

    def steps(self, i: int) -> int:
        return len(self.batches(i))

    def local(self, i, x0, lr, direction, shift=None):
        """K_i steps x ← x − shift − lr(direction(g-point gradient on the step's minibatch, x) + wd·x)."""
        a, b = self.clients[i]
        x = x0.copy()
        for rows in self.batches(i):
            d = direction(a, b, x) if rows is None else direction(a[rows], b[rows], x)
            x = x - (0.0 if shift is None else shift) - lr * (d + self.wd * x)
        return x

    def mean(self, cohort, vectors) -> np.ndarray:
        """mean_S, uniform or weighted by n_i."""
        w = np.array([len(self.clients[i][1]) if self.by_samples else 1.0 for i in cohort], np.float64)
        return np.sum([wi * v for wi, v in zip(w / w.sum(), vectors, strict=True)], axis=0)


def scaffold(f: Federation, gradient=grad) -> np.ndarray:
    """SCAFFOLD option II; `gradient` is where the loss gradient is taken (FedGAMMA: the SAM point)."""
    x, c, ci = f.x0.copy(), np.zeros_like(f.x0), [np.zeros_like(f.x0) for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, deltas, dcs = f.lr(t), f.sampler.cohort(t + 1), [], []
        for i in cohort:
            xi = f.local(i, x, lr, lambda a, b, y, i=i, c=c: gradient(a, b, y) - ci[i] + c)
            new = ci[i] - c + (x - xi) / (f.steps(i) * lr)
            deltas.append(xi - x)
            dcs.append(new - ci[i])
            ci[i] = new
        x = x + f.server_lr * f.mean(cohort, deltas)
        c = c + np.sum(dcs, axis=0) / f.n
    return x


def fedsam(f: Federation, rho: float) -> np.ndarray:
    """FedSAM (docs/algorithms/fedsam.md): both gradients on the step's minibatch, ε = 1e-12."""
    x = f.x0.copy()
    for t in range(f.rounds):
        lr, cohort = f.lr(t), f.sampler.cohort(t + 1)
        deltas = [f.local(i, x, lr, lambda a, b, y: sam_grad(a, b, y, rho, 1e-12)) - x for i in cohort]
        x = x + f.server_lr * f.mean(cohort, deltas)
    return x


def feddyn(f: Federation, alpha: float, rho: float = 0.0, eps: float = 1e-7, mix: float = 1.0) -> np.ndarray:
    """FedDyn's paper form; rho > 0 gives FedSpeed's code form with μ = alpha (docs/algorithms/fedspeed.md)."""
    x, h, dual = f.x0.copy(), np.zeros_like(f.x0), [np.zeros_like(f.x0) for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, local_models = f.lr(t), f.sampler.cohort(t + 1), []
        for i in cohort:
            g = (lambda a, b, y: sam_grad(a, b, y, rho, eps, mix)) if rho else grad
            xi = f.local(i, x, lr, lambda a, b, y, i=i, g=g: g(a, b, y) - dual[i] + alpha * (y - x))
            dual[i] = dual[i] - alpha * (xi - x)
            h = h - alpha * (xi - x) / f.n
            local_models.append(xi)
        x = np.mean(local_models, axis=0) - h / alpha
    return x


def fedspeed_ing(f: Federation, mu: float, rho: float, zeta: float) -> np.ndarray:
    """FedSpeed-Ing (docs/algorithms/fedspeed-ing.md) with the thesis' sampled aggregation
    x^{t+1} = mean_S(x_{i,K} − ĝ_i/μ)."""
    x, x_prev = f.x0.copy(), f.x0.copy()
    ghat = [np.zeros_like(x) for _ in range(f.n)]
    gcheck = [np.zeros_like(x) for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, uploads = f.lr(t), f.sampler.cohort(t + 1), []
        x_tilde = x + zeta * (x - x_prev)
        for i in cohort:
            step = lambda a, b, y, i=i: sam_grad(a, b, y, rho, 1e-7) - gcheck[i] + mu * (y - x_tilde)
            xi = f.local(i, x, lr, step)
            new = ghat[i] - mu * (xi - x)
            gcheck[i] = new + zeta * (new - ghat[i])
            ghat[i] = new
            uploads.append(xi - new / mu)
        x_prev, x = x, np.mean(uploads, axis=0)
    return x


def fedadmm_wang(f: Federation, rho: float) -> np.ndarray:
    x = f.x0.copy()
    lam = [np.zeros_like(x) for _ in range(f.n)]
    xhat = [f.x0.copy() for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, change = f.lr(t), f.sampler.cohort(t + 1), np.zeros_like(x)
        for i in cohort:
            xi = f.local(i, x, lr, lambda a, b, y, i=i: grad(a, b, y) + lam[i] + rho * (y - x))
            lam[i] = lam[i] + rho * (xi - x)
            new = xi + lam[i] / rho
            change += new - xhat[i]
            xhat[i] = new
        x = x + change / f.n
    return x


def fedcm(f: Federation, alpha: float, rho: float = 0.0) -> np.ndarray:
    """FedCM (docs/algorithms/fedcm.md); rho > 0 is MoFedSAM (docs/algorithms/mofedsam.md)."""
    x, big_d = f.x0.copy(), np.zeros_like(f.x0)
    for t in range(f.rounds):
        lr, cohort, deltas = f.lr(t), f.sampler.cohort(t + 1), []
        g = (lambda a, b, y: sam_grad(a, b, y, rho, 1e-12)) if rho else grad
        for i in cohort:
            deltas.append(f.local(i, x, lr, lambda a, b, y, g=g: alpha * g(a, b, y) + (1 - alpha) * big_d) - x)
        big_d = -np.mean(deltas, axis=0) / (lr * f.k)
        x = x + np.mean(deltas, axis=0)
    return x


def fedmim(f: Federation, alphas: tuple[float, ...], betas: tuple[float, ...]) -> np.ndarray:
    x, history = f.x0.copy(), []  # history[j] = δ_{t−j}
    scale = 1.0 - sum(alphas)
    for t in range(f.rounds):
        lr, cohort = f.lr(t), f.sampler.cohort(t + 1)
        a_t = sum((w * d for w, d in zip(alphas, history, strict=False)), np.zeros_like(x))
        b_t = sum((w * d for w, d in zip(betas, history, strict=False)), np.zeros_like(x))
        step = lambda a, b, y: scale * grad(a, b, y - b_t)
        new_x = np.mean([f.local(i, x, lr, step, shift=a_t) for i in cohort], axis=0)
        history = [-(new_x - x) / f.k] + history[: len(alphas) - 1]
        x = new_x
    return x


def fedavgm(f: Federation, beta: float) -> np.ndarray:
    """FedAvgM (docs/algorithms/fedavgm.md): v ← βv + mean_S Δ_i, x ← x + η_g v."""
    x, v = f.x0.copy(), np.zeros_like(f.x0)
    for t in range(f.rounds):
        lr, cohort = f.lr(t), f.sampler.cohort(t + 1)
        v = beta * v + f.mean(cohort, [f.local(i, x, lr, grad) - x for i in cohort])
        x = x + f.server_lr * v
    return x


def fedexp(f: Federation, eps: float) -> np.ndarray:
    """FedExP (docs/algorithms/fedexp.md): η_g = max(1, mean_S‖Δ_i‖² / (2(‖Δ̄‖² + |S| ε γ^{2t}))), x ← x + η_g Δ̄."""
    x, decay = f.x0.copy(), float(f.cfg["lr-decay"])
    for t in range(f.rounds):
        lr, cohort = f.lr(t), f.sampler.cohort(t + 1)
        deltas = [f.local(i, x, lr, grad) - x for i in cohort]
        mean = f.mean(cohort, deltas)
        spread = f.mean(cohort, [np.array([d @ d]) for d in deltas])[0]
        step = max(1.0, spread / (2 * (mean @ mean + len(cohort) * eps * decay ** (2 * t))))
        x = x + step * mean
    return x


def fedgamma(f: Federation, rho: float) -> np.ndarray:
    """FedGAMMA (docs/algorithms/fedgamma.md): SCAFFOLD's option II with the gradient at ESAM's point (ε = 1e-7)."""
    return scaffold(f, lambda a, b, y: sam_grad(a, b, y, rho, 1e-7))


def fedsmoo(f: Federation, mu: float, rho: float) -> np.ndarray:
    """FedSMOO (docs/algorithms/fedsmoo.md): FedDyn's client and server with the dynamic-dual ascent point
    a = g1 − ν_i − s, e = ρa/(‖a‖ + 1e-7), ν_i ← ν_i + e − s, gradient at x + e; s = ρm/(‖m‖ + 1e-7), m = mean_S ν_i."""
    x, h, s = f.x0.copy(), np.zeros_like(f.x0), np.zeros_like(f.x0)
    dual, nu = [np.zeros_like(f.x0) for _ in range(f.n)], [np.zeros_like(f.x0) for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort, local_models = f.lr(t), f.sampler.cohort(t + 1), []
        for i in cohort:

            def step(a, b, y, i=i, s=s, x=x):
                ascent = grad(a, b, y) - nu[i] - s
                e = rho * ascent / (np.linalg.norm(ascent) + 1e-7)
                nu[i] = nu[i] + e - s
                return grad(a, b, y + e) - dual[i] + mu * (y - x)

            xi = f.local(i, x, lr, step)
            dual[i] = dual[i] - mu * (xi - x)
            h = h + (xi - x) / f.n
            local_models.append(xi)
        m = f.mean(cohort, [nu[i] for i in cohort])
        x = np.mean(local_models, axis=0) + h
        s = rho * m / (np.linalg.norm(m) + 1e-7)
    return x


def check_trajectory(cfg: dict, reference) -> None:
    """A whole in-process run of `cfg` equals `reference(Federation(cfg))` to 1e-5 relative, and has moved."""
    from fedsuite.run.inprocess import run_inprocess

    expected = reference(Federation(cfg))
    got = run_inprocess(cfg).x
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-5
    assert np.linalg.norm(got - Federation(cfg).x0) / np.linalg.norm(expected) > 1e-2  # it moved
