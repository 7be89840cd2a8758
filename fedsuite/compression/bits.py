"""Bit packing: n-bit unsigned integers into a tight byte stream and back, and float32 scalars/vectors as bytes.

The stream is little-endian at every level: value i's bit j is stream bit i·w + j, and stream bit p is bit p mod 8
of byte p // 8 (so `packed_size(n, w) = ceil(n·w / 8)` bytes, the last byte zero-padded). Packing and unpacking are
vectorised torch operations on the values' device (column operations over groups of 8 values, which fill exactly w
bytes); only the conversion to `bytes` moves to the host.
"""

from __future__ import annotations

import numpy as np
import torch

MAX_WIDTH = 56  # a value shifted by up to 7 bits still fits an int64 without its sign bit
GROUP = 8  # values per group: 8 values of w bits fill exactly w bytes


def packed_size(count: int, width: int) -> int:
    """Bytes that `count` values of `width` bits take in the stream: ceil(count·width / 8)."""
    return (count * width + 7) // 8


def width_for(largest: int) -> int:
    """The fewest bits that hold every integer in [0, largest] (at least 1)."""
    return max(1, int(largest).bit_length())


def _check_width(width: int) -> None:
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"bit width {width}: must be 1 ≤ width ≤ {MAX_WIDTH}")


def _slots(member: int, width: int) -> tuple[int, int, int]:
    """Where a group's value `member` lies in the group's `width` bytes: first byte, bit offset in it, byte count."""
    first, offset = divmod(member * width, 8)
    return first, offset, (offset + width + 7) // 8


def _holding(bits: int) -> torch.dtype:
    """The narrowest signed integer type whose non-negative range holds `bits` bits (int64 at most)."""
    return torch.int16 if bits <= 15 else torch.int32 if bits <= 31 else torch.int64


def _grouped(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`values` as `dtype`, zero-padded to whole groups, one group per row."""
    flat = values.reshape(-1).to(dtype)
    pad = -flat.numel() % GROUP
    if pad:
        flat = torch.cat([flat, torch.zeros(pad, dtype=dtype, device=flat.device)])
    return flat.view(-1, GROUP)


def pack_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """The 1-D uint8 tensor (on `values`' device) of `values` (integers in [0, 2^width)) packed `width` bits each.

    Values are taken 8 at a time (a group fills exactly `width` bytes); each of a group's 8 members is shifted to its
    bit offset and its bytes OR-ed into the group's bytes, as column operations over all groups at once, in the
    narrowest integer type that holds a shifted value."""
    _check_width(width)
    count = values.numel()
    members = _grouped(values, _holding(width + 7))
    out = torch.zeros((members.shape[0], width), dtype=torch.uint8, device=values.device)
    for member in range(GROUP):
        first, offset, span = _slots(member, width)
        shifted = torch.bitwise_left_shift(members[:, member], offset) if offset else members[:, member]
        for t in range(span):
            byte = torch.bitwise_right_shift(shifted, 8 * t) if t else shifted
            out[:, first + t].bitwise_or_(torch.bitwise_and(byte, 255).to(torch.uint8))
    return out.view(-1)[: packed_size(count, width)]


def unpack_bits(packed: torch.Tensor, count: int, width: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """The `count` values (on `packed`'s device, as `dtype`) that `pack_bits(values, width)` packed into `packed`."""
    _check_width(width)
    need = packed_size(count, width)
    if packed.numel() < need:
        raise ValueError(f"{packed.numel()} bytes cannot hold {count} values of {width} bits ({need} bytes)")
    groups = -(-count // GROUP)
    stream = torch.zeros(groups * width, dtype=torch.uint8, device=packed.device)
    stream[:need] = packed.reshape(-1)[:need]
    grouped = stream.view(groups, width)
    work = _holding(8 * max(_slots(member, width)[2] for member in range(GROUP)))
    values = torch.empty((groups, GROUP), dtype=work, device=packed.device)
    mask = (1 << width) - 1
    for member in range(GROUP):
        first, offset, span = _slots(member, width)
        gathered = grouped[:, first].to(work)
        for t in range(1, span):
            gathered.bitwise_or_(torch.bitwise_left_shift(grouped[:, first + t].to(work), 8 * t))
        values[:, member] = torch.bitwise_and(torch.bitwise_right_shift(gathered, offset), mask)
    return values.view(-1)[:count].to(dtype)


def to_bytes(packed: torch.Tensor) -> bytes:
    """A uint8 tensor's bytes (moves it to the host)."""
    return packed.detach().to("cpu", torch.uint8).numpy().tobytes()


def from_bytes(data: bytes, device: torch.device | str | None = None) -> torch.Tensor:
    """`data` as a 1-D uint8 tensor on `device`."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device or "cpu")


def float32_bytes(values: torch.Tensor) -> bytes:
    """`values` (any shape, any float dtype) as little-endian float32 bytes, 4 per value (moves them to the host)."""
    return values.detach().to("cpu", torch.float32).numpy().astype("<f4", copy=False).tobytes()


def float32_values(data: bytes, device: torch.device | str | None = None) -> torch.Tensor:
    """The 1-D float32 tensor (on `device`) of little-endian float32 bytes."""
    host = np.frombuffer(data, dtype="<f4").astype(np.float32)
    return torch.from_numpy(host).to(device or "cpu")


class ByteReader:
    """Reads a payload's consecutive fields; `done()` refuses bytes left over."""

    def __init__(self, data: bytes):
        self.data, self.offset = data, 0

    def take(self, size: int) -> bytes:
        end = self.offset + size
        if end > len(self.data):
            raise ValueError(f"payload of {len(self.data)} bytes ends before byte {end}")
        chunk, self.offset = self.data[self.offset : end], end
        return chunk

    def done(self) -> None:
        if self.offset != len(self.data):
            raise ValueError(f"payload of {len(self.data)} bytes has {len(self.data) - self.offset} bytes left over")
