"""`.npy` bytes without numpy's copies: the header np.save writes before an array, an array read as a view of
such bytes, and `.npz` files (what np.savez writes and np.load reads) built from them. Used for Flower's messages
(fedsuite.server.wire) and for client-state files of model size (fedsuite.state.DiskStore).

`np.savez` passes every array through a buffered iterator and `tobytes` before the zip member sees it, and `np.load`
reads a member in 256 KiB pieces into a new array: two extra copies each way of every vector, every round, for every
client. Here a member is written as its `.npy` header and the array's own memory in one piece, and read in one
piece as a read-only view of the bytes read (the zip member's checksum is verified as before). Anything but a plain
C-ordered array of a non-object dtype goes through numpy's own functions, so a file is always one np.load reads to
the same values, and np.savez's files are read here as they always were.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from io import BytesIO
from typing import BinaryIO

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
    if fortran_order or dtype.hasobject:
        return None
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - stream.tell() < count * dtype.itemsize:  # np.load's complaint about a truncated array
        raise ValueError(f"EOF: reading array data, expected {count * dtype.itemsize} bytes got "
                         f"{len(data) - stream.tell()}")  # fmt: skip
    return np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell()).reshape(shape)


def write_npz(file: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """np.savez(file, **arrays): a zip of stored members, one `.npy` each."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            array = np.asanyarray(value)
            with archive.open(name + SUFFIX, "w", force_zip64=True) as member:
                header = npy_header(array)
                if header is None:
                    npy.write_array(member, array, allow_pickle=False)
                else:
                    member.write(header)
                    member.write(memoryview(array).cast("B"))


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
