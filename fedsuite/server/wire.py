"""Flower's legacy `Parameters` (each array a `.npy` byte string) without Flower's extra copies.

`flwr.common.ndarrays_to_parameters` writes every array through `np.save` into a growing `BytesIO` in 16 MiB
chunks, and `parameters_to_ndarrays` reads it back through `np.load` in 256 KiB chunks: for an 11 M-parameter
model that is several full copies per message. Here an array's bytes are its `.npy` header and its data, written in
one piece (`to_parameters`: the very bytes `np.save` writes), and an array is read as a view of the message's
bytes (`arrays_of`: the values `np.load` reads; read-only) or as one writable copy (`writable_arrays_of`). Anything
but a plain C-ordered array of a non-object dtype (a Fortran-ordered array, an object dtype, a header of format
3.0) goes through Flower's own functions, so the result is always what Flower's would be.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.common import Parameters, ndarrays_to_parameters, parameters_to_ndarrays

from fedsuite.codec.npy_bytes import npy_header, npy_view

TENSOR_TYPE = "numpy.ndarray"  # what flwr.common.ndarrays_to_parameters names its tensors


def array_bytes(array: np.ndarray) -> bytes:
    """The bytes `np.save(f, array, allow_pickle=False)` writes, in one piece."""
    array = np.asanyarray(array)
    header = npy_header(array)
    if header is None:
        return ndarrays_to_parameters([array]).tensors[0]
    return b"".join((header, memoryview(array).cast("B")))


def to_parameters(arrays: Sequence[np.ndarray]) -> Parameters:
    """`flwr.common.ndarrays_to_parameters(arrays)`, byte for byte."""
    return Parameters(tensors=[array_bytes(a) for a in arrays], tensor_type=TENSOR_TYPE)


def array_view(tensor: bytes) -> np.ndarray:
    """The array `np.load` reads from `tensor`, as a read-only view of its bytes where the format allows."""
    view = npy_view(tensor)
    return view if view is not None else parameters_to_ndarrays(Parameters([tensor], TENSOR_TYPE))[0]


def arrays_of(parameters: Parameters) -> list[np.ndarray]:
    """`flwr.common.parameters_to_ndarrays(parameters)`'s values, as read-only views (no copy)."""
    return [array_view(t) for t in parameters.tensors]


def writable_arrays_of(parameters: Parameters) -> list[np.ndarray]:
    """`flwr.common.parameters_to_ndarrays(parameters)`: writable arrays, one copy each."""
    return [array_view(t).copy() for t in parameters.tensors]
