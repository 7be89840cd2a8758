"""Scaled sign: one bit per coordinate and one float32 scale, C(x) = (‖x‖₁ / d) · sign(x), with sign(0) = +1.

Encoding: the scale as float32, then the d sign bits (1: negative) packed 8 to a byte (fedsuite/compression/bits.py):

    encoded_bytes(d) = 4 + ceil(d / 8)

On the CPU the magnitudes, the signs and the reconstruction are numpy arrays (fedsuite/compression/bits.py says
why); the scale is the same torch sum of the same magnitudes.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsuite.compression.base import Compressor, Encoded, Parts, check_dimension
from fedsuite.compression.bits import (
    ByteReader,
    absolute,
    float32_bytes,
    float32_values,
    from_bytes,
    on_host,
    pack_bits,
    packed_size,
    to_bytes,
    unpack_bits,
)


class ScaledSign(Compressor):
    """`sign`: deterministic and biased. ‖C(x) − x‖² = ‖x‖² − ‖x‖₁²/d ≤ (1 − 1/d)‖x‖² (as ‖x‖₁ ≥ ‖x‖₂), so
    ω = 1 − 1/d (δ = 1/d, the worst case: a vector with one non-zero coordinate)."""

    name, unbiased = "sign", False

    def encoded_bytes(self, d: int) -> int:
        return 4 + packed_size(check_dimension(d), 1)

    def omega(self, d: int) -> float:
        return 1.0 - 1.0 / check_dimension(d)

    def parts(self, x: torch.Tensor, generator: torch.Generator | None) -> Parts:
        negative = torch.from_numpy(np.less(x.numpy(), 0)) if on_host(x) else x < 0
        return {"scale": absolute(x).sum() / x.numel(), "negative": negative}

    def pack(self, parts: Parts, d: int) -> bytes:
        return float32_bytes(parts["scale"]) + to_bytes(pack_bits(parts["negative"], 1))

    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        reader = ByteReader(encoded.data)
        scale = float32_values(reader.take(4), device).reshape(())
        negative = unpack_bits(from_bytes(reader.take(packed_size(d, 1)), device), d, 1, torch.bool)
        reader.done()
        return {"scale": scale, "negative": negative}

    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        scale, negative = parts["scale"], parts["negative"]
        if on_host(scale) and on_host(negative):  # (1 − 2·[negative])·s: ±s exactly, in place
            values = np.multiply(negative.numpy(), -2, dtype=scale.numpy().dtype)
            values += 1
            return torch.from_numpy(np.multiply(values, scale.numpy(), out=values))
        return torch.where(negative, -scale.expand(d), scale.expand(d))
