"""The float64 copies of the replies' arrays, in buffers used again round after round.

A rule aggregates every reply's arrays in float64, so each of a round's replies is widened into a new d-vector
(10 clients of an 11 M-parameter model: 900 MB a round). A fresh array of that size costs more in new pages (the
kernel maps and zeroes every one of them on first touch) than the conversion into it. So a round's copies go into
the buffers of the round before that nothing holds any more.

A buffer is taken again only when its reference count says that this pool is its only holder: a rule, observer or
test that kept a reply's array, or any view of it (a slice, `torch.from_numpy`, a memoryview), holds a reference
to it, and such a buffer is left to its holder and never written again. The values are those of
`array.astype(np.float64)`, so a run is the same bit for bit with or without reuse. The count is CPython's (the
project's Python versions; a free-threaded build counts differently), and a holder that keeps only a raw pointer
to the data (through ctypes or a C extension), holding no Python reference, is not seen: keep the array itself.
The conversion runs a block of coordinates at a time on a few threads (fedsuite/server/blockwise.py).
"""

from __future__ import annotations

import sys

import numpy as np

from fedsuite.server import blockwise

_ONLY_THE_POOL = 3  # the `_lent` list, the loop's name for the buffer, and getrefcount's own argument


class WideCopies:
    """`copy(array, server_round)`: `array.astype(np.float64)`, in a buffer of an earlier round where one is free."""

    def __init__(self):
        self._lent: list[np.ndarray] = []  # every buffer handed out in the current round
        self._free: list[np.ndarray] = []  # buffers of the round before that nothing else holds
        self._round: int | None = None
        self.reused = 0  # how many copies went into a buffer of an earlier round (tests, benchmarks)

    def copy(self, array: np.ndarray, server_round: int) -> np.ndarray:
        if server_round != self._round:
            self._round = server_round
            self._reclaim()
        buffer = self._take(array.shape)
        flat_out, flat_in = buffer.reshape(-1), np.ascontiguousarray(array).reshape(-1)

        def convert(span: tuple[int, int]) -> None:  # astype's conversion, into the buffer, a block at a time
            np.copyto(flat_out[span[0] : span[1]], flat_in[span[0] : span[1]], casting="unsafe")

        blockwise.each(blockwise.spans(flat_out.size), convert)
        self._lent.append(buffer)
        return buffer

    def _reclaim(self) -> None:
        """The last round's buffers that only this pool still refers to become free; the others, and any free buffer
        the last round did not need, are let go."""
        free = []
        for buffer in self._lent:
            if sys.getrefcount(buffer) == _ONLY_THE_POOL:
                free.append(buffer)
        self._lent, self._free = [], free

    def _take(self, shape: tuple[int, ...]) -> np.ndarray:
        for i, buffer in enumerate(self._free):
            if buffer.shape == shape:
                self.reused += 1
                return self._free.pop(i)
        return np.empty(shape, np.float64)
