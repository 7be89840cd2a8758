"""Bit packing: n-bit unsigned integers into a tight byte stream and back, float32 scalars/vectors as bytes, and the
CPU's large buffers.

The stream is little-endian at every level: value i's bit j is stream bit i·w + j, and stream bit p is bit p mod 8
of byte p // 8 (so `packed_size(n, w) = ceil(n·w / 8)` bytes, the last byte zero-padded). On the CPU, packing is
numpy: w = 1 is `np.packbits`, w = 8 a cast, w = 2 and 4 shifts within each byte, and any other width takes the
values 8 at a time (8 values of w bits fill exactly w bytes), builds each group's ceil(w/8) little-endian 64-bit
words (value j shifted to bit j·w of the group, split across two words where it straddles one) and keeps their
first w bytes, block by block so the temporaries stay in cache. Elsewhere it is torch column operations over such
groups on the values' device (`_pack_device`, `_unpack_device`), so nothing waits for the host; only the conversion
to `bytes` moves there. Both write the same bytes (tests/test_compression.py checks them against a bit-by-bit
reference for every width).

Large CPU vectors are made in memory that numpy allocates (`host_zeros`, `host_empty`, `absolute`): numpy asks Linux
for transparent huge pages for a large array, so a fresh 45 MB vector costs a few page faults instead of one per
4 KiB, several times less time than a fresh torch tensor where huge pages are granted on request only.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

MAX_WIDTH = 56  # a value shifted by up to 7 bits still fits an int64 without its sign bit
GROUP = 8  # values per group: 8 values of w bits fill exactly w bytes
BLOCK = 1 << 15  # groups packed or unpacked at a time on the CPU (the temporaries of a block fit in cache)


def packed_size(count: int, width: int) -> int:
    """Bytes that `count` values of `width` bits take in the stream: ceil(count·width / 8)."""
    return (count * width + 7) // 8


def width_for(largest: int) -> int:
    """The fewest bits that hold every integer in [0, largest] (at least 1)."""
    return max(1, int(largest).bit_length())


def _check_width(width: int) -> None:
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"bit width {width}: must be 1 ≤ width ≤ {MAX_WIDTH}")


@functools.cache
def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """numpy's dtype for a torch dtype; None where numpy has none (bfloat16, …)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return None


def on_host(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is on the CPU in a dtype numpy has, so the CPU paths (numpy) may take it."""
    return tensor.device.type == "cpu" and numpy_dtype(tensor.dtype) is not None


def host_empty(count: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU vector of `count` entries in memory numpy allocates (see the module docstring)."""
    return torch.from_numpy(np.empty(count, numpy_dtype(dtype)))


def host_zeros(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero vector of `count` entries on `device`; on the CPU in memory numpy allocates (see the module docstring)."""
    if torch.device(device).type == "cpu" and numpy_dtype(dtype) is not None:
        return torch.from_numpy(np.zeros(count, numpy_dtype(dtype)))
    return torch.zeros(count, dtype=dtype, device=device)


def absolute(x: torch.Tensor) -> torch.Tensor:
    """|x| (the same values as `x.abs()`); on the CPU in memory numpy allocates (see the module docstring)."""
    if on_host(x):
        return torch.from_numpy(np.abs(x.detach().numpy()))
    return x.abs()


def pack_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """The 1-D uint8 tensor (on `values`' device) of `values` (integers in [0, 2^width)) packed `width` bits each."""
    _check_width(width)
    if on_host(values):
        return torch.from_numpy(pack_host(values.detach().reshape(-1).numpy(), width))
    return _pack_device(values, width)


def unpack_bits(packed: torch.Tensor, count: int, width: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """The `count` values (on `packed`'s device, as `dtype`) that `pack_bits(values, width)` packed into `packed`."""
    _check_width(width)
    need = packed_size(count, width)
    if packed.numel() < need:
        raise ValueError(f"{packed.numel()} bytes cannot hold {count} values of {width} bits ({need} bytes)")
    if packed.device.type == "cpu" and numpy_dtype(dtype) is not None:
        host = packed.detach().reshape(-1)[:need].to(torch.uint8).numpy()
        return torch.from_numpy(unpack_host(host, count, width, numpy_dtype(dtype)))
    return _unpack_device(packed, count, width).to(dtype)


def pack_host(values: np.ndarray, width: int) -> np.ndarray:
    """`pack_bits` in numpy: the uint8 stream of a 1-D array of non-negative integers (or booleans) below 2^width."""
    _check_width(width)
    if width == 1:
        return np.packbits(values, bitorder="little")
    if 8 % width == 0:
        return values.astype(np.uint8) if width == 8 else _pack_within_bytes(values, width)
    full, rest = divmod(values.size, GROUP)
    out = np.empty((full + (rest > 0)) * width, np.uint8)
    grouped, rows = values[: full * GROUP].reshape(full, GROUP), out[: full * width].reshape(full, width)
    for start in range(0, full, BLOCK):
        rows[start : start + BLOCK] = _group_bytes(grouped[start : start + BLOCK], width)
    if rest:
        tail = np.zeros((1, GROUP), values.dtype)
        tail[0, :rest] = values[full * GROUP :]
        out[full * width :] = _group_bytes(tail, width)[0]
    return out[: packed_size(values.size, width)]


def _pack_within_bytes(values: np.ndarray, width: int) -> np.ndarray:
    """Widths 2 and 4: each byte holds 8 / width whole values, value j of a byte at bit j·width."""
    per = 8 // width
    full, rest = divmod(values.size, per)
    narrow = values.astype(np.uint8, copy=False)
    rows = narrow[: full * per].reshape(full, per)
    out = np.empty(full + (rest > 0), np.uint8)
    np.copyto(out[:full], rows[:, 0])
    for member in range(1, per):
        out[:full] |= rows[:, member] << (member * width)
    if rest:
        out[full] = sum(int(value) << (member * width) for member, value in enumerate(narrow[full * per :]))
    return out


def _unpack_within_bytes(packed: np.ndarray, count: int, width: int, dtype: np.dtype) -> np.ndarray:
    """The inverse of `_pack_within_bytes`: value j of each byte from its bits j·width onwards."""
    per = 8 // width
    stream = packed[: -(-count // per)]
    out = np.empty((stream.size, per), dtype)
    for member in range(per):
        out[:, member] = (stream >> (member * width)) & ((1 << width) - 1)
    return out.reshape(-1)[:count]


def _group_bytes(grouped: np.ndarray, width: int) -> np.ndarray:
    """Each row of 8 values as its `width` bytes: the row's ceil(width/8) little-endian words, value j at bit j·w."""
    words = np.zeros((grouped.shape[0], -(-width // 8)), dtype="<u8")
    for member in range(GROUP):
        column = grouped[:, member].astype(np.uint64)
        word, offset = divmod(member * width, 64)
        words[:, word] |= column << np.uint64(offset)
        if offset + width > 64:
            words[:, word + 1] |= column >> np.uint64(64 - offset)
    return words.view(np.uint8)[:, :width]


def unpack_host(packed: np.ndarray, count: int, width: int, dtype: np.dtype) -> np.ndarray:
    """`unpack_bits` in numpy: the `count` values (as `dtype`) of the uint8 stream `packed` (at least
    `packed_size(count, width)` bytes)."""
    _check_width(width)
    if width == 1:
        bits = np.unpackbits(packed, count=count, bitorder="little")
        return bits.view(np.bool_) if dtype == np.bool_ else bits.astype(dtype)
    if 8 % width == 0:
        return packed[:count].astype(dtype) if width == 8 else _unpack_within_bytes(packed, count, width, dtype)
    full, rest = divmod(count, GROUP)
    out = np.empty((full + (rest > 0)) * GROUP, dtype)
    grouped, rows = packed[: full * width].reshape(full, width), out[: full * GROUP].reshape(full, GROUP)
    for start in range(0, full, BLOCK):
        _group_values(grouped[start : start + BLOCK], width, rows[start : start + BLOCK])
    if rest:
        tail = np.zeros((1, width), np.uint8)
        tail[0, : packed_size(count, width) - full * width] = packed[full * width : packed_size(count, width)]
        _group_values(tail, width, out[full * GROUP :].reshape(1, GROUP))
    return out[:count]


def _group_values(grouped: np.ndarray, width: int, out: np.ndarray) -> None:
    """Fills `out` (rows of 8) with the values of each row of `width` bytes, read back from the row's words."""
    words_bytes = np.zeros((grouped.shape[0], 8 * -(-width // 8)), np.uint8)
    words_bytes[:, :width] = grouped
    words = words_bytes.view("<u8")
    mask = np.uint64((1 << width) - 1)
    for member in range(GROUP):
        word, offset = divmod(member * width, 64)
        column = words[:, word] >> np.uint64(offset)
        if offset + width > 64:
            column |= words[:, word + 1] << np.uint64(64 - offset)
        out[:, member] = column & mask


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


def _pack_device(values: torch.Tensor, width: int) -> torch.Tensor:
    """`pack_bits` as torch column operations on the values' device: each of a group's 8 members is shifted to its
    bit offset and its bytes OR-ed into the group's bytes, in the narrowest integer type that holds a shifted value."""
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


def _unpack_device(packed: torch.Tensor, count: int, width: int) -> torch.Tensor:
    """`unpack_bits` as torch column operations on the packed bytes' device, in the narrowest type that holds them."""
    need = packed_size(count, width)
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
    return values.view(-1)[:count]


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
