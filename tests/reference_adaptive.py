"""Independent float64 numpy implementations of the adaptive family (docs/algorithms/fadamet.md, fadamgt.md,
localadam.md, fedlada.md) and MimeSVRG on the full-batch least-squares federation of `tests/reference.py`, written from
those pages alone (no fedsuite code beyond the cohort/tracking sampler and the data).

Every local step uses g = ∇F_i(x) + wd·x; the Adam rule is AMSGrad without bias correction, m = 0 each round,
v̂ starting at the carried v.
"""

from __future__ import annotations

import numpy as np

from tests.reference import Federation, grad


def adam_local(f: Federation, i, x0, lr, v0, b1, b2, eps, before=None, after=None, alpha=1.0, shift=None):
    """K Adam steps; `before` is added to g ahead of the moments (FAdamGT), `after` to the move (FAdamET);
    FedLADA: move α·u + (1 − α)·shift. Returns (x_K, final v, mean of the raw gradients g_k)."""
    a, b = f.clients[i]
    x, m, v, vhat, gsum = x0.copy(), np.zeros_like(x0), v0.copy(), v0.copy(), np.zeros_like(x0)
    for _ in range(f.k):
        g = grad(a, b, x) + f.wd * x
        gsum += g
        gh = g if before is None else g + before
        m = b1 * m + (1 - b1) * gh
        v = b2 * v + (1 - b2) * gh * gh
        vhat = np.maximum(vhat, v)
        u = m / (np.sqrt(vhat) + eps)
        if after is not None:
            u = u + after
        if shift is not None:
            u = alpha * u + (1 - alpha) * shift
        x = x - lr * u
    return x, v, gsum / f.k


def fadam(f: Federation, variant: str, tracking: int = 0, b1=0.9, b2=0.99, eps=1e-8) -> np.ndarray:
    """variant 'et' (correction after the moments), 'gt' (before them) or 'local' (LocalAdam, y ≡ 0)."""
    x, y = f.x0.copy(), np.zeros_like(f.x0)
    yi = [np.zeros_like(x) for _ in range(f.n)]
    vi = [np.zeros_like(x) for _ in range(f.n)]
    for t in range(f.rounds):
        lr, cohort = f.lr(t), f.sampler.cohort(t + 1)
        tracked = set(f.sampler.tracking(t + 1, cohort, tracking)) if variant != "local" else set()
        deltas, change = [], np.zeros_like(x)
        for i in cohort:
            corr = y - yi[i]
            xi, vi[i], gmean = adam_local(f, i, x, lr, vi[i], b1, b2, eps, before=corr if variant == "gt" else None,
                                          after=corr if variant == "et" else None)  # fmt: skip
            if i in tracked:
                new = gmean if variant == "gt" else yi[i] - y + (x - xi) / (f.k * lr)
                change += new - yi[i]
                yi[i] = new
            deltas.append(xi - x)
        x = x + np.mean(deltas, axis=0)
        y = y + change / f.n
    return x


def fedlada(f: Federation, alpha: float, b1=0.9, b2=0.99, eps=1e-8) -> np.ndarray:
    x, g_a, vbar = f.x0.copy(), np.zeros_like(f.x0), np.zeros_like(f.x0)
    for t in range(f.rounds):
        lr, cohort, deltas, vs = f.lr(t), f.sampler.cohort(t + 1), [], []
        for i in cohort:
            xi, v, _ = adam_local(f, i, x, lr, vbar, b1, b2, eps, alpha=alpha, shift=g_a)
            deltas.append(xi - x)
            vs.append(v)
        g_a = -np.mean(deltas, axis=0) / (f.k * lr)
        vbar = np.mean(vs, axis=0)
        x = x + np.mean(deltas, axis=0)
    return x


def mimesvrg(f: Federation) -> np.ndarray:
    """Full-batch Mime-SVRG: c = mean_S ∇F_i(x^t); steps x ← x − η(∇F_i(x) − ∇F_i(x^t) + c + wd·x)."""
    x = f.x0.copy()
    for t in range(f.rounds):
        lr, cohort = f.lr(t), f.sampler.cohort(t + 1)
        c = np.mean([grad(a, b, x) for a, b in (f.clients[i] for i in cohort)], axis=0)
        step = lambda a, b, z, anchor=x, c=c: grad(a, b, z) - grad(a, b, anchor) + c  # noqa: E731
        x = x + np.mean([f.local(i, x, lr, step) - x for i in cohort], axis=0)
    return x
