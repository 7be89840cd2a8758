"""The file of one partition's client state: named arrays stored raw after a small header (fedsuite.state.DiskStore).

A client writes its state vectors every round it trains, and reads them back the next time: for a model of
11.2 M parameters that is 45 MB a vector, two copies of each (the vectors and the previous ones). The `.npz` format
checksums every byte both ways, which cost more than the write itself; this format stores the bytes as they are:

    8 bytes   b"FEDSTAT" + the format version (1)
    8 bytes   the header's length H, unsigned little-endian
    H bytes   JSON: {"members": [{"name", "dtype" (numpy's str, e.g. "<f4"), "shape", "offset", "bytes"}, …],
                     "end": the data's length}
    padding   to a multiple of ALIGN bytes, where the data starts; each member starts at a multiple of ALIGN

A member is read straight into a new array (one copy, from the file system). The file's length must be what its
header says, so a truncated file is refused, naming it; a file damaged in place without changing its length is not
detected here (a checkpoint's copies carry digests: fedsuite.checkpoint_files). Only numeric and boolean arrays are
stored: nothing in a state file is ever unpickled.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

MAGIC = b"FEDSTAT\x01"
ALIGN = 64
_LENGTH = struct.Struct("<Q")
KINDS = "biufc"  # numpy dtype kinds a state file holds: booleans, integers, floats, complex


class StateFileError(ValueError):
    """A client-state file that cannot be read: not this format, truncated, or its header damaged."""


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def write_state_file(file: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` to the open binary `file` in this format."""
    members, offset, data = [], 0, []
    for name, value in arrays.items():
        array = np.asarray(value)
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would also make a 0-d array 1-d)
            array = np.ascontiguousarray(array)
        if array.dtype.kind not in KINDS:
            raise TypeError(f"client state {name!r} has dtype {array.dtype}: only numeric arrays are stored")
        members.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape), "offset": offset,
                        "bytes": array.nbytes})  # fmt: skip
        data.append((offset, array))
        offset = _aligned(offset + array.nbytes)
    header = json.dumps({"members": members, "end": offset}).encode()
    start = _aligned(len(MAGIC) + _LENGTH.size + len(header))
    file.write(MAGIC + _LENGTH.pack(len(header)) + header + b"\0" * (start - len(MAGIC) - _LENGTH.size - len(header)))
    written = 0
    for member_offset, array in data:
        if member_offset > written:
            file.write(b"\0" * (member_offset - written))
        file.write(array.reshape(-1).view(np.uint8))
        written = member_offset + array.nbytes
    if offset > written:
        file.write(b"\0" * (offset - written))


def read_index(path: Path) -> dict[str, tuple[np.dtype, tuple[int, ...], int, int]]:
    """Each member's (dtype, shape, position in the file, bytes); StateFileError for a file that is not whole."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        lead = f.read(len(MAGIC) + _LENGTH.size)
        if len(lead) < len(MAGIC) + _LENGTH.size or lead[: len(MAGIC)] != MAGIC:
            raise StateFileError(f"{path} is not a fedsuite client-state file (or it is truncated)")
        (length,) = _LENGTH.unpack(lead[len(MAGIC) :])
        raw = f.read(length) if length <= size else b""
    try:
        header = json.loads(raw)
        start = _aligned(len(MAGIC) + _LENGTH.size + length)
        if size != start + int(header["end"]):
            raise StateFileError(f"{path} is corrupt: {size} bytes, its header says {start + int(header['end'])} "
                                 "(truncated or appended to)")  # fmt: skip
        index = {}
        for m in header["members"]:
            dtype, shape = np.dtype(m["dtype"]), tuple(int(n) for n in m["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            if dtype.kind not in KINDS or count * dtype.itemsize != int(m["bytes"]) or int(m["offset"]) < 0 or \
                    int(m["offset"]) + int(m["bytes"]) > int(header["end"]):  # fmt: skip
                raise StateFileError(f"{path} is corrupt: member {m.get('name')!r} does not fit its header")
            index[str(m["name"])] = (dtype, shape, start + int(m["offset"]), int(m["bytes"]))
    except StateFileError:
        raise
    except (ValueError, TypeError, KeyError) as err:
        raise StateFileError(f"{path} is corrupt: its header cannot be read ({type(err).__name__})") from None
    return index


def read_member(path: Path, index: dict, name: str) -> np.ndarray:
    """Member `name` of the file `index` (read_index's) describes, in a new array."""
    dtype, shape, position, nbytes = index[name]
    array = np.empty(shape, dtype)
    with open(path, "rb") as f:
        f.seek(position)
        got = f.readinto(array.reshape(-1).view(np.uint8)) if nbytes else 0
    if got != nbytes:
        raise StateFileError(f"{path} is corrupt: a member ends early ({got} of {nbytes} bytes)")
    return array


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every member of the file, by name (to inspect a file: `python -c` or a notebook)."""
    index = read_index(path)
    return {name: read_member(path, index, name) for name in index}
