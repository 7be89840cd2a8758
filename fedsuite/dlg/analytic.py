"""The closed-form reconstruction from a softmax regression's gradient (docs/dlg/defences.md).

For one record x with label y, the cross-entropy gradient of `model='logreg'` (a linear layer W x + b with bias) is
∇W = (p − y) xᵀ and ∇b = p − y, so every class row gives the record back: x = ∇W_k / ∇b_k. For a mean over several
records, row k gives Σ_i a_ik x_i / Σ_i a_ik (a_i = p_i − y_i): a mix weighted towards the records labelled k.
The flat vector is the layer's parameters in `parameters()` order: W row by row, then b.
"""

from __future__ import annotations

import numpy as np


def class_ratios(gradient: np.ndarray, num_classes: int) -> np.ndarray:
    """x̂_k = ∇W_k / ∇b_k for every class k: an array (num_classes, features)."""
    gradient = np.asarray(gradient, np.float64)
    features = gradient.size // num_classes - 1
    if gradient.size != num_classes * (features + 1):
        raise ValueError(f"a gradient of {gradient.size} entries is not a linear layer's with {num_classes} classes")
    weights, bias = gradient[: num_classes * features].reshape(num_classes, features), gradient[-num_classes:]
    return weights / bias[:, None]


def reconstruct(gradient: np.ndarray, num_classes: int) -> np.ndarray:
    """The attacker's one guess: the ratio of the class row with the largest |∇b_k| (a one-record gradient's label
    row, the least affected by noise)."""
    bias = np.asarray(gradient, np.float64)[-num_classes:]
    return class_ratios(gradient, num_classes)[int(np.abs(bias).argmax())]
