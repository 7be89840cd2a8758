"""QSGD-style unbiased stochastic quantization with s levels (Alistarh et al., 2017).

Each coordinate becomes ‖x‖₂ · sign(x_i) · l_i / s, with l_i ∈ {0, …, s} drawn so that E[l_i] = s|x_i| / ‖x‖₂ (the
level below with the probability of the distance to the level above). Encoding: ‖x‖₂ as float32, then one code per
coordinate, c_i = 2·l_i + [x_i < 0], bit-packed at b = 1 + ceil(log2(s + 1)) bits (fedsuite/compression/bits.py):

    encoded_bytes(d) = 4 + ceil(d·b / 8)
"""

from __future__ import annotations

import math

import torch

from fedsuite.compression.base import (
    Compressor,
    Encoded,
    Parts,
    check_dimension,
    check_whole,
    need_generator,
    uniform,
)
from fedsuite.compression.bits import (
    ByteReader,
    float32_bytes,
    float32_values,
    from_bytes,
    pack_bits,
    packed_size,
    to_bytes,
    unpack_bits,
    width_for,
)

LEVELS_KEY = "compress-levels"
MAX_LEVELS = 2**16 - 1  # 17 bits per coordinate at most; levels are exact in float32


def code_width(levels: int) -> int:
    """Bits per coordinate: the sign and ceil(log2(s + 1)) bits of level."""
    return 1 + width_for(levels)


def quantize(x: torch.Tensor, levels: int, generator: torch.Generator) -> Parts:
    """The norm, the levels l_i (int32) and the signs (True: negative) of x, on x's device (no synchronisation:
    a zero vector gets level 0 everywhere through a clamped divisor)."""
    norm = torch.linalg.vector_norm(x)
    ratio = x.abs() * (levels / norm.clamp_min(torch.finfo(x.dtype).tiny))
    lower = torch.floor(ratio)
    up = uniform(generator, x.numel(), x.device, x.dtype) < (ratio - lower)
    level = (lower + up.to(x.dtype)).clamp_(max=levels).to(torch.int32)
    return {"norm": norm, "levels": level, "negative": x < 0}


def dequantize(parts: Parts, levels: int) -> torch.Tensor:
    """‖x‖₂ · sign · l_i / s in the norm's dtype."""
    magnitude = parts["levels"].to(parts["norm"].dtype) * (parts["norm"] / levels)
    return torch.where(parts["negative"], -magnitude, magnitude)


class QSGD(Compressor):
    """`qsgd`: unbiased stochastic quantization to s levels. ω = min(d/s², √d/s) (Alistarh et al., Lemma 3.1):
    E‖C(x) − x‖² ≤ min(d/s², √d/s)‖x‖²."""

    name, unbiased = "qsgd", True

    def __init__(self, levels: int):
        self.levels = check_whole(LEVELS_KEY, levels, 1, MAX_LEVELS, "QSGD's number of levels s")
        self.width = code_width(self.levels)

    def encoded_bytes(self, d: int) -> int:
        return 4 + packed_size(check_dimension(d), self.width)

    def omega(self, d: int) -> float:
        s = self.levels
        return min(d / s**2, math.sqrt(d) / s)

    def parts(self, x: torch.Tensor, generator: torch.Generator | None) -> Parts:
        return quantize(x, self.levels, need_generator(self.name, generator))

    def pack(self, parts: Parts, d: int) -> bytes:
        codes = parts["levels"] * 2 + parts["negative"].to(parts["levels"].dtype)
        return float32_bytes(parts["norm"]) + to_bytes(pack_bits(codes, self.width))

    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        reader = ByteReader(encoded.data)
        norm = float32_values(reader.take(4), device).reshape(())
        packed = from_bytes(reader.take(packed_size(d, self.width)), device)
        codes = unpack_bits(packed, d, self.width, torch.int32)
        reader.done()
        levels = torch.bitwise_right_shift(codes, 1)
        if int(levels.max()) > self.levels:
            raise ValueError(f"qsgd: a level {int(levels.max())} above s = {self.levels}")
        return {"norm": norm, "levels": levels, "negative": torch.bitwise_and(codes, 1).bool()}

    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        return dequantize(parts, self.levels)

    def __repr__(self) -> str:
        return f"QSGD(levels={self.levels})"
