"""QSGD-style unbiased stochastic quantization with s levels (Alistarh et al., 2017).

Each coordinate becomes ‖x‖₂ · sign(x_i) · l_i / s, with l_i ∈ {0, …, s} drawn so that E[l_i] = s|x_i| / ‖x‖₂ (the
level below with the probability of the distance to the level above). Encoding: ‖x‖₂ as float32, then one code per
coordinate, c_i = 2·l_i + [x_i < 0], bit-packed at b = 1 + ceil(log2(s + 1)) bits (fedsuite/compression/bits.py):

    encoded_bytes(d) = 4 + ceil(d·b / 8)

The message as tensors is the norm and the codes (uint8 where b ≤ 8). On the CPU (float32 and float64 vectors, a
CPU generator) the codes are made in numpy a block at a time, from the same uniform draws (one `torch.rand` of d
entries from the generator) and the same float operations as the torch path other devices take, so both give the
same codes; the reconstruction looks each code up in a table of its 2s + 2 possible values, each computed as the
elementwise formula computes it.
"""

from __future__ import annotations

import math

import numpy as np
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
    host_empty,
    on_host,
    pack_bits,
    packed_size,
    to_bytes,
    unpack_bits,
    width_for,
)

LEVELS_KEY = "compress-levels"
MAX_LEVELS = 2**16 - 1  # 17 bits per coordinate at most; levels are exact in float32
BLOCK = 1 << 16  # coordinates quantized at a time on the CPU (a block's temporaries fit in cache)


def code_width(levels: int) -> int:
    """Bits per coordinate: the sign and ceil(log2(s + 1)) bits of level."""
    return 1 + width_for(levels)


def code_dtype(levels: int) -> torch.dtype:
    """The codes' integer type: uint8 where they fit (s ≤ 127), else int32."""
    return torch.uint8 if code_width(levels) <= 8 else torch.int32


def quantize(x: torch.Tensor, levels: int, generator: torch.Generator) -> Parts:
    """The norm and the codes c_i = 2·l_i + [x_i < 0] (`code_dtype`) of x, on x's device (no synchronisation: a zero
    vector gets level 0 everywhere, its divisor clamped and the scale s/‖x‖ kept finite)."""
    norm = torch.linalg.vector_norm(x)
    limits = torch.finfo(x.dtype)
    scale = (levels / norm.clamp_min(limits.tiny)).clamp_max(limits.max)
    if x.device.type == generator.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        draws = host_empty(x.numel(), x.dtype)
        torch.rand(x.numel(), generator=generator, dtype=x.dtype, out=draws)
        codes = _host_codes(x.numpy(), draws.numpy(), scale.numpy(), levels)
    else:
        codes = _device_codes(x, uniform(generator, x.numel(), x.device, x.dtype), scale, levels)
    return {"norm": norm, "codes": codes}


def _device_codes(x: torch.Tensor, draws: torch.Tensor, scale: torch.Tensor, levels: int) -> torch.Tensor:
    """The codes in torch: l_i = min(floor(r_i) + [u_i < r_i − floor(r_i)], s) with r_i = |x_i|·scale."""
    ratio = x.abs().mul_(scale)
    lower = torch.floor(ratio)
    up = draws < ratio.sub_(lower)
    level = lower.add_(up).clamp_(max=levels).to(torch.int32)
    return level.mul_(2).add_(x < 0).to(code_dtype(levels))


def _host_codes(x: np.ndarray, draws: np.ndarray, scale: np.ndarray, levels: int) -> torch.Tensor:
    """`_device_codes` in numpy, a block at a time, with the same float operations (so the same codes)."""
    codes = host_empty(x.size, code_dtype(levels)).numpy()
    ratio, lower, flag = np.empty(BLOCK, x.dtype), np.empty(BLOCK, x.dtype), np.empty(BLOCK, np.bool_)
    for start in range(0, x.size, BLOCK):
        part, size = slice(start, start + BLOCK), min(BLOCK, x.size - start)
        r, low, f, c = ratio[:size], lower[:size], flag[:size], codes[part]
        np.multiply(np.abs(x[part], out=r), scale, out=r)
        np.floor(r, out=low)
        np.add(low, np.less(draws[part], np.subtract(r, low, out=r), out=f), out=low)
        np.minimum(low, levels, out=low)
        np.copyto(c, low, casting="unsafe")
        c <<= 1
        c |= np.less(x[part], 0, out=f)
    return torch.from_numpy(codes)


def dequantize(parts: Parts, levels: int) -> torch.Tensor:
    """‖x‖₂ · sign · l_i / s in the norm's dtype, l_i = c_i >> 1 and the sign c_i & 1 of each code."""
    codes, step = parts["codes"], parts["norm"] / levels
    if on_host(codes) and on_host(step):
        code = torch.arange(2 * levels + 2)
        table = _values(code, step)
        return torch.from_numpy(table.numpy()[codes.numpy()])
    return _values(codes, step)


def _values(codes: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """What each code stands for: (c >> 1)·step, negated where c is odd."""
    magnitude = torch.bitwise_right_shift(codes, 1).to(step.dtype) * step
    return torch.where(torch.bitwise_and(codes, 1).bool(), -magnitude, magnitude)


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
        return float32_bytes(parts["norm"]) + to_bytes(pack_bits(parts["codes"], self.width))

    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        reader = ByteReader(encoded.data)
        norm = float32_values(reader.take(4), device).reshape(())
        packed = from_bytes(reader.take(packed_size(d, self.width)), device)
        codes = unpack_bits(packed, d, self.width, code_dtype(self.levels))
        reader.done()
        if int(codes.max()) > 2 * self.levels + 1:
            raise ValueError(f"qsgd: a level {int(codes.max()) >> 1} above s = {self.levels}")
        return {"norm": norm, "codes": codes}

    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        return dequantize(parts, self.levels)

    def __repr__(self) -> str:
        return f"QSGD(levels={self.levels})"
