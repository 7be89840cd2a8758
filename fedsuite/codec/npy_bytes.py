"""`.npy` bytes without numpy's copies: the header np.save writes before an array, an array read as a view of
such bytes, and a member of an `.npz` file (np.savez's) read in one piece. Used for Flower's messages
(fedsuite.server.wire) and for the `.npz` client-state files of earlier versions (fedsuite.state.store.DiskStore).

`np.load` reads an `.npz` member in 256 KiB pieces into a new array; here it is read in one piece (the zip member's
checksum verified as before) and viewed. Anything but a plain C-ordered array of a non-object dtype goes through
numpy's own functions, so the values are always the ones np.load reads.
"""

from __future__ import annotations

import zipfile
from io import BytesIO

import numpy as np
from numpy.lib import format as npy

SUFFIX = ".npy"  # np.savez names a member <key>.npy


def npy_header(array: np.ndarray) -> bytes | None:
    """The `.npy` header np.save writes before `array`'s bytes, or None where np.save must write the array itself
    (an object dtype, a layout other than C order, a subclass, a header too long for format 1.0)."""
    if array.dtype.hasobject or not array.flags.c_contiguous or type(array) is not np.ndarray:
        return None
    header = BytesIO()
    try:
        npy.write_array_header_1_0(header, npy.header_data_from_array_1_0(array))
    except ValueError:
        return None
    return header.getvalue()


def npy_view(data: bytes) -> np.ndarray | None:
    """The array np.load reads from `.npy` bytes, as a read-only view of them; None where np.load must read it
    (Fortran order, an object dtype, a format other than 1.0 and 2.0). A truncated array raises np.load's error."""
    stream = BytesIO(data)
    version = npy.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = npy.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran_order, dtype = npy.read_array_header_2_0(stream)
    else:
        return None
    if fortran_order or dtype.hasobject or any(n < 0 for n in shape):  # np.load refuses a negative dimension
        return None
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - stream.tell() < count * dtype.itemsize:  # np.load's complaint about a truncated array
        raise ValueError(
            f"EOF: reading array data, expected {count * dtype.itemsize} bytes got {len(data) - stream.tell()}"
        )
    return np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell()).reshape(shape)


def member_names(path) -> list[str]:
    """The keys np.load(path).files lists."""
    with zipfile.ZipFile(path) as archive:
        return [n.removesuffix(SUFFIX) for n in archive.namelist()]


def read_member(path, name: str) -> np.ndarray:
    """np.load(path)[name], a read-only view of the member's bytes where the format allows; KeyError if absent."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        member = name + SUFFIX if name + SUFFIX in names else name
        if member not in names:
            raise KeyError(f"{name} is not a file in the archive")
        data = archive.read(member)  # in one piece; the member's checksum is checked here
    view = npy_view(data)
    return view if view is not None else npy.read_array(BytesIO(data), allow_pickle=False)
