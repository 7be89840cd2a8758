"""Top-k sparsification: the k coordinates of largest magnitude, their values and their indices.

Encoding: the k values as float32 (ascending index order), then the k indices bit-packed at the fixed width
w = max(1, ceil(log2 d)) bits (the fewest bits that hold d − 1; fedsuite/compression/bits.py):

    encoded_bytes(d) = 4k + ceil(k·w / 8)

(Fixed width rather than delta coding: the size is known before the vector is, which the byte accounting and the
server's parsing both use.)
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsuite.compression.base import Compressor, Encoded, Parts, check_dimension, check_whole
from fedsuite.compression.bits import (
    ByteReader,
    absolute,
    float32_bytes,
    float32_values,
    from_bytes,
    host_zeros,
    pack_bits,
    packed_size,
    to_bytes,
    unpack_bits,
    width_for,
)

K_KEY = "compress-k"
K_MEANING = "the number of coordinates kept"
SAMPLE = 1 << 16  # entries sampled to place the sampled path's threshold
SAMPLED_FROM = 1 << 18  # the CPU's sampled path is for vectors of at least this many entries …
SAMPLED_SHARE = 16  # … that keep at most 1/16 of them (more: the candidates would be most of the vector)


def index_width(d: int) -> int:
    """Bits per index of a d-vector: max(1, ceil(log2 d))."""
    return width_for(d - 1)


def top_indices(magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    """The indices (ascending) of the k largest entries of `magnitudes`; among equal entries at the k-th largest value
    the lowest indices win, so the choice is the same on every device. A large float vector on the CPU takes the
    sampled path (`sampled_top_indices`), which returns the same indices; otherwise, and where that path finds too
    few candidates, the full selection (`full_top_indices`)."""
    d = magnitudes.numel()
    if k == d:
        return torch.arange(d, device=magnitudes.device)
    host_float = magnitudes.device.type == "cpu" and magnitudes.dtype in (torch.float32, torch.float64)
    if host_float and d >= SAMPLED_FROM and k * SAMPLED_SHARE <= d:
        found = sampled_top_indices(magnitudes.detach().reshape(-1).numpy(), k, SAMPLE)
        if found is not None:
            return torch.from_numpy(found)
    return full_top_indices(magnitudes, k)


def full_top_indices(magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    """`top_indices` over the whole vector: the k-th largest value is a selection (`_kth_largest`), the chosen
    coordinates a mask with exactly k entries (`nonzero_static`). On an accelerator nothing waits for the host; on
    the CPU, where asking costs nothing, the running count that breaks ties is taken only when more entries tie at
    the k-th value than the k places left for them."""
    d = magnitudes.numel()
    if k == d:
        return torch.arange(d, device=magnitudes.device)
    kth = _kth_largest(magnitudes, k)
    above = magnitudes > kth
    tied = magnitudes == kth
    room = k - above.sum()
    if magnitudes.device.type == "cpu" and int(tied.sum()) == int(room):
        chosen = above | tied  # no tie to break: every entry at the k-th value is kept
    else:
        chosen = above | (tied & (torch.cumsum(tied, 0) <= room))
    return torch.nonzero_static(chosen, size=k).reshape(-1)


def _kth_largest(magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest entry, as a 0-d tensor on `magnitudes`' device: numpy's selection for float32 and float64 on
    the CPU (introselect, a few times faster there than torch's), `torch.kthvalue` elsewhere."""
    d = magnitudes.numel()
    if magnitudes.device.type == "cpu" and magnitudes.dtype in (torch.float32, torch.float64):
        flat = magnitudes.detach().reshape(-1).numpy()
        return torch.as_tensor(np.partition(flat, d - k)[d - k])
    return torch.kthvalue(magnitudes, d - k + 1).values


def sampled_top_indices(magnitudes: np.ndarray, k: int, sample: int) -> np.ndarray | None:
    """`top_indices` of a 1-D numpy array through a threshold, or None where the threshold lets fewer than k entries
    through (the caller then selects over the whole vector).

    The threshold t is the r-th largest of about `sample` entries taken at a fixed stride (the same entries on every
    call), r = 2μ + 4√μ + 8 with μ = k·sample/d the number of sampled entries expected above the k-th largest value,
    so about twice k entries pass. The candidates are the entries not below t (NaN included, which numpy's selection
    places above every number). If there are at least k, every entry at or above the k-th largest value is one of
    them, so the k-th largest candidate is the vector's k-th largest value and the same rule (the entries above it,
    then the lowest-index entries equal to it) picks the same indices among the candidates, kept in index order."""
    d = magnitudes.size
    strided = magnitudes[:: max(1, d // sample)]
    expected = k * strided.size / d
    rank = min(strided.size, math.ceil(2 * expected + 4 * math.sqrt(expected) + 8))
    threshold = np.partition(strided, strided.size - rank)[strided.size - rank]
    passing = np.less(magnitudes, threshold)
    candidates = np.flatnonzero(np.logical_not(passing, out=passing))
    if candidates.size < k:
        return None
    values = magnitudes[candidates]
    kth = np.partition(values, values.size - k)[values.size - k]
    above, tied = values > kth, values == kth
    room = k - int(np.count_nonzero(above))
    if int(np.count_nonzero(tied)) != room:
        tied &= np.cumsum(tied) <= room
    chosen = candidates[above | tied]
    return chosen if chosen.size == k else None


def scatter(indices: torch.Tensor, values: torch.Tensor, d: int) -> torch.Tensor:
    """The dense d-vector with `values` at `indices` and zeros elsewhere (on the CPU in memory numpy allocates)."""
    dense = host_zeros(d, values.dtype, values.device)
    dense[indices] = values
    return dense


class TopK(Compressor):
    """`topk`: keeps exactly the k largest |x_i| (ties to the lowest index), zeros the rest. Biased and contractive:
    ‖C(x) − x‖² ≤ (1 − k/d)‖x‖², so ω = 1 − k/d (δ = k/d). Lossless on its support: the kept values are exact, and
    k = d sends x itself."""

    name, unbiased = "topk", False

    def __init__(self, k: int):
        self.k = check_whole(K_KEY, k, 1, None, K_MEANING)

    def _k_for(self, d: int) -> int:
        return check_whole(K_KEY, self.k, 1, check_dimension(d), K_MEANING)

    def encoded_bytes(self, d: int) -> int:
        k = self._k_for(d)
        return 4 * k + packed_size(k, index_width(d))

    def omega(self, d: int) -> float:
        return 1.0 - self._k_for(d) / d

    def parts(self, x: torch.Tensor, generator: torch.Generator | None) -> Parts:
        indices = top_indices(absolute(x), self.k)
        return {"indices": indices, "values": x[indices]}

    def pack(self, parts: Parts, d: int) -> bytes:
        return float32_bytes(parts["values"]) + to_bytes(pack_bits(parts["indices"], index_width(d)))

    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        k, width = self._k_for(d), index_width(d)
        reader = ByteReader(encoded.data)
        values = float32_values(reader.take(4 * k), device)
        indices = unpack_bits(from_bytes(reader.take(packed_size(k, width)), device), k, width)
        reader.done()
        if k and int(indices.max()) >= d:
            raise ValueError(f"topk: an index {int(indices.max())} outside a vector of {d}")
        return {"indices": indices, "values": values}

    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        return scatter(parts["indices"], parts["values"], d)

    def __repr__(self) -> str:
        return f"TopK(k={self.k})"
