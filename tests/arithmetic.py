"""Which float arithmetic this machine does, for the tests that pin tiny runs' results bit for bit.

The same code on the same torch and NumPy can end in other last bits on another processor: MKL, which does torch's
matrix products on x86, picks its kernels by the processor it finds (AVX-512 on one machine, older code paths on
another), and the math libraries may differ too. A pin holds for the machines whose arithmetic it was taken with.
`fingerprint()` hashes a few products and elementwise functions done with torch, NumPy and the C library, none of
fedsuite's code, so a change in fedsuite can never change it: a pinned test looks up the pins of this fingerprint,
and a fedsuite change that moves a result still fails there.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import numpy as np
import torch

FIRST_MACHINE = "first pinning machine"  # the pins taken first; their machine's fingerprint was not recorded


def fingerprint() -> str:
    """16 hex digits of sha256 over a few float32 products (shapes like the tests' linear models), torch and NumPy
    elementwise functions, their sums and three C-library functions."""
    generator = torch.Generator().manual_seed(0)
    parts: list[bytes] = []
    for rows, inner, cols in ((50, 5, 1), (64, 8, 4), (32, 200, 10)):
        a = torch.randn(rows, inner, generator=generator)
        b = torch.randn(inner, cols, generator=generator)
        bias = torch.randn(cols, generator=generator)
        parts += [(a @ b).numpy().tobytes(), torch.nn.functional.linear(a, b.T, bias).numpy().tobytes()]
    v = torch.rand(4099, generator=generator) + 0.5
    for value in (v.sqrt(), v.exp(), v.log(), v.rsqrt(), v.pow(0.7), v / (v.sqrt() + 1e-8)):
        parts.append(value.numpy().tobytes())
    parts.append(np.array([v.sum().item(), v.double().sum().item()]).tobytes())
    x = np.random.default_rng(0).random(4099) + 0.5
    for array in (np.sqrt(x), np.exp(x), np.log(x), np.power(x, 0.7), np.sum(x)):
        parts.append(np.asarray(array).tobytes())
    parts.append(repr([math.exp(0.3), math.pow(1.7, 0.3), math.log(2.5)]).encode())
    return hashlib.sha256(b"".join(parts)).hexdigest()[:16]


def pins_for_this_machine(pins: Mapping[str, dict]) -> tuple[str, dict]:
    """(this machine's fingerprint, the pins taken with its arithmetic): those listed under its fingerprint, else the
    first machine's (`FIRST_MACHINE`). A third kind of machine fails the pinned tests, naming its fingerprint; its
    pins are added only from a commit whose results still equal the listed pins on a listed machine."""
    mine = fingerprint()
    return mine, pins.get(mine, pins[FIRST_MACHINE])
