"""What a compressor is (`Compressor`), what it sends (`Encoded`), the checks every compressor shares, and the
identity compressor (`none`).

A compressor C maps a 1-D vector x ∈ R^d to a message. Three views of the same map:

- `compress(x, generator) -> Encoded`: the bytes that would travel (float32 values, bit-packed integers; the few
  scalars a compressor needs, such as a norm, are float32 fields inside the bytes), plus, for random-k only, the
  seed of its coordinate draw, which does not travel: the server derives it from the same shared seed;
- `decompress(encoded, d) -> tensor`: the server's reconstruction C(x);
- `apply(x, generator) -> tensor`: C(x) computed on x's device without building bytes (no host synchronisation),
  bit-identical to `decompress(compress(x, g), d)` for a float32 x and a generator in the same state. It keeps x's
  dtype, so reference maths may run it in float64.

`encoded_bytes(d)` is the exact size of `Encoded.data` for a d-vector, `unbiased` says whether E[C(x)] = x, and
`omega(d)` bounds the relative error: E‖C(x) − x‖² ≤ ω‖x‖² for every x. For an unbiased compressor ω is its variance
factor; for a biased (contractive) one ω = 1 − δ < 1, the contraction error feedback needs. Each compressor's
docstring gives its ω. Compressors sit behind the round stages of docs/developer/architecture.md (Round stages): a
client stage compresses what leaves, a server stage decodes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from fedsuite.compression.bits import float32_bytes, float32_values, on_host

Parts = dict[str, Any]  # a message as tensors (and, for random-k, the seed), before packing / after unpacking


@dataclass(frozen=True)
class Encoded:
    """A compressed vector: `data`, the bytes that travel (`len(data) == compressor.encoded_bytes(d)`), and `seed`,
    the seed of random-k's coordinate draw (None for the others), which both sides derive and so does not travel."""

    data: bytes
    seed: int | None = None


def check_vector(x: torch.Tensor, *, wire: bool) -> int:
    """d of a 1-D floating-point tensor with at least one entry; `wire`: it is encoded as float32, so it must be."""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not x.is_floating_point() or x.numel() == 0:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"compressors take a non-empty 1-D floating-point tensor; got {shape}")
    if wire and x.dtype != torch.float32:
        raise ValueError(f"compress() encodes float32 vectors; got {x.dtype} (apply() keeps other dtypes)")
    return x.numel()


def check_whole(key: str, value: Any, low: int, high: int | None, meaning: str) -> int:
    """`value` as an int in [low, high] (high None: no upper bound), else a one-line ValueError naming `key`."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or value < low or (high is not None and value > high):
        bound = f"{low} ≤ {key} ≤ {high}" if high is not None else f"{key} ≥ {low}"
        raise ValueError(f"{key}={value!r}: {meaning} must be a whole number, {bound}")
    return value


def check_dimension(d: Any) -> int:
    return check_whole("d", d, 1, None, "the vector's length")


def need_generator(name: str, generator: torch.Generator | None) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"the {name} compressor draws random numbers: pass a torch.Generator")
    return generator


def uniform(generator: torch.Generator, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """d uniform draws in [0, 1) from `generator` on its own device, then on `device` (a generator on the vector's
    device avoids a copy)."""
    return torch.rand(d, generator=generator, device=generator.device, dtype=dtype).to(device)


class Compressor(ABC):
    """The interface (see the module docstring). A subclass writes `parts` (the message as tensors), `pack` and
    `unpack` (the message as bytes and back, exactly) and `expand` (the message as a dense d-vector)."""

    name: str = ""
    unbiased: bool = False

    @abstractmethod
    def encoded_bytes(self, d: int) -> int:
        """The exact number of bytes `compress` sends for a d-vector."""

    @abstractmethod
    def omega(self, d: int) -> float:
        """ω with E‖C(x) − x‖² ≤ ω‖x‖² for every x ∈ R^d."""

    @abstractmethod
    def parts(self, x: torch.Tensor, generator: torch.Generator | None) -> Parts:
        """The message for x as tensors on x's device."""

    @abstractmethod
    def pack(self, parts: Parts, d: int) -> bytes:
        """The message's bytes."""

    @abstractmethod
    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        """The message back from its bytes, on `device`."""

    @abstractmethod
    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        """C(x) as a dense d-vector from the message."""

    def compress(self, x: torch.Tensor, generator: torch.Generator | None = None) -> Encoded:
        d = check_vector(x, wire=True)
        self.encoded_bytes(d)  # refuses parameters that do not fit d
        parts = self.parts(x.detach(), generator)
        return Encoded(self.pack(parts, d), parts.get("seed"))

    def decompress(self, encoded: Encoded, d: int, device: torch.device | str | None = None) -> torch.Tensor:
        expected = self.encoded_bytes(check_dimension(d))
        if len(encoded.data) != expected:
            raise ValueError(f"{self.name}: {len(encoded.data)} bytes for d={d}; the encoding has {expected}")
        return self.expand(self.unpack(encoded, d, torch.device(device or "cpu")), d)

    def apply(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        d = check_vector(x, wire=False)
        self.encoded_bytes(d)
        return self.expand(self.parts(x.detach(), generator), d)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(Compressor):
    """`none`: x itself, 4d bytes (float32). Unbiased, ω = 0."""

    name, unbiased = "none", True

    def encoded_bytes(self, d: int) -> int:
        return 4 * check_dimension(d)

    def omega(self, d: int) -> float:
        return 0.0

    def parts(self, x: torch.Tensor, generator: torch.Generator | None) -> Parts:
        return {"values": x}

    def pack(self, parts: Parts, d: int) -> bytes:
        return float32_bytes(parts["values"])

    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        return {"values": float32_values(encoded.data, device)}

    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        values = parts["values"]  # a copy, on the CPU in memory numpy allocates (fedsuite/compression/bits.py)
        return torch.from_numpy(values.numpy().copy()) if on_host(values) else values.clone()
