"""The file of one partition's client state: named arrays stored raw after a small header
(fedsuite.state.store.DiskStore).

A client writes its state vectors every round it trains, and reads them back the next time: for a model of
11.2 M parameters that is 45 MB a vector, two copies of each (the vectors and the previous ones). The `.npz` format
checksums every byte both ways, which cost more than the write itself; this format stores the bytes as they are:

    8 bytes   b"FEDSTAT" + the format version (1)
    8 bytes   the header's length H, unsigned little-endian
    H bytes   JSON: {"members": [{"name", "dtype" (numpy's str, e.g. "<f4"), "shape", "offset", "bytes"}, …],
                     "links": [{"name", "file", "member"}, …], "end": the data's length}
    padding   to a multiple of ALIGN bytes, where the data starts; each member starts at a multiple of ALIGN

A link is a member kept in another file of the same folder (`file`, named as LINKED_FILE allows) under the name
`member`: a client's previous vectors stay in the file it wrote before, instead of being written again
(fedsuite.state.store.DiskStore).

A member is read straight into a new array (one copy, from the file system). The file's length must be what its
header says, so a truncated file is refused, naming it; a file damaged in place without changing its length is not
detected here (a checkpoint's copies carry digests: fedsuite.results.checkpoint_files). Only numeric and boolean arrays
are stored: nothing in a state file is ever unpickled.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

MAGIC = b"FEDSTAT\x01"
ALIGN = 64
_LENGTH = struct.Struct("<Q")
LINKED_FILE = re.compile(r"previous-[0-9]{6,}-[ab]\.state")  # fedsuite.state.store.DiskStore's kept files
MAX_HEADER = 1 << 24  # bytes: far above any real header (a few hundred bytes a member)
KINDS = "biufc"  # numpy dtype kinds a state file holds: booleans, integers, floats, complex


class StateFileError(ValueError):
    """A client-state file that cannot be read: not this format, truncated, or its header damaged."""


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def write_state_file(file: BinaryIO, arrays: Mapping[str, np.ndarray],
                     links: Mapping[str, tuple[str, str]] | None = None) -> None:  # fmt: skip
    """Write `arrays` to the open binary `file` in this format, and `links` (name → (file, member))."""
    links = dict(links or {})
    for name, (file_name, member) in links.items():
        if name in arrays or not LINKED_FILE.fullmatch(file_name) or type(member) is not str:
            raise ValueError(f"client state link {name!r} → {file_name!r}:{member!r} cannot be written")
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
    linked = [{"name": name, "file": file_name, "member": member} for name, (file_name, member) in links.items()]
    header = json.dumps({"members": members, "links": linked, "end": offset}).encode()
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


def _count(value) -> int:
    """A header's integer: a JSON integer ≥ 0 (not a boolean, a float or a string), else ValueError."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a non-negative integer")
    return value


@dataclass(frozen=True)
class Index:
    """A state file's members, name → (dtype, shape, position in the file, bytes), and the file's (device, inode,
    size) when it was indexed."""

    members: dict[str, tuple[np.dtype, tuple[int, ...], int, int]]
    identity: tuple[int, int, int]
    links: dict[str, tuple[str, str]]  # name → (a file of the same folder, its member)


def read_index(path: Path) -> Index:
    """The file's Index; StateFileError for a file that is not whole or whose header does not describe it."""
    path = Path(path)
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        lead = f.read(len(MAGIC) + _LENGTH.size)
        if len(lead) < len(MAGIC) + _LENGTH.size or lead[: len(MAGIC)] != MAGIC:
            raise StateFileError(f"{path} is not a fedsuite client-state file (or it is truncated)")
        (length,) = _LENGTH.unpack(lead[len(MAGIC) :])
        if length > min(MAX_HEADER, stat.st_size):
            raise StateFileError(f"{path} is corrupt: its header would be {length} bytes")
        raw = f.read(length)
    try:
        header = json.loads(raw)
        start = _aligned(len(MAGIC) + _LENGTH.size + length)
        end = _count(header["end"])
        if stat.st_size != start + end:
            raise StateFileError(f"{path} is corrupt: {stat.st_size} bytes, its header says {start + end} "
                                 "(truncated or appended to)")  # fmt: skip
        members: dict = {}
        for m in header["members"]:
            dtype = np.dtype(str(m["dtype"]))
            shape = tuple(_count(n) for n in m["shape"]) if isinstance(m["shape"], list) else None
            offset, nbytes = _count(m["offset"]), _count(m["bytes"])
            name = m["name"]
            fits = dtype.kind in KINDS and dtype.subdtype is None and shape is not None and type(name) is str
            if not fits or name in members or math.prod(shape) * dtype.itemsize != nbytes or offset + nbytes > end:
                raise StateFileError(f"{path} is corrupt: member {str(name)[:60]!r} does not fit its header")
            members[name] = (dtype, shape, start + offset, nbytes)
        links = {}
        for entry in header.get("links", []):
            name, file_name, member = entry["name"], entry["file"], entry["member"]
            if type(name) is not str or name in members or name in links or type(file_name) is not str or \
                    not LINKED_FILE.fullmatch(file_name) or type(member) is not str:  # fmt: skip
                raise StateFileError(f"{path} is corrupt: link {str(name)[:60]!r} does not fit its header")
            links[name] = (file_name, member)
    except StateFileError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as err:
        why = f"{type(err).__name__}: {err}".splitlines()[0][:120]
        raise StateFileError(f"{path} is corrupt: its header cannot be read ({why})") from None
    return Index(members, (stat.st_dev, stat.st_ino, stat.st_size), links)


def read_member(path: Path, index: Index, name: str) -> np.ndarray:
    """Member `name` of the file `index` (read_index's) describes, in a new array; StateFileError if the file was
    replaced or changed in length since it was indexed."""
    dtype, shape, position, nbytes = index.members[name]
    array = np.empty(shape, dtype)
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        if (stat.st_dev, stat.st_ino, stat.st_size) != index.identity:
            raise StateFileError(f"{path} changed while it was read (replaced by another writer?)")
        f.seek(position)
        got = f.readinto(array.reshape(-1).view(np.uint8)) if nbytes else 0
    if got != nbytes:
        raise StateFileError(f"{path} is corrupt: member {name!r} ends early ({got} of {nbytes} bytes)")
    return array


def read_linked(path: Path, name: str, link: tuple[str, str], indexes: dict | None = None) -> np.ndarray:
    """`name` of the file `path`, kept in another file of its folder as `link` = (file, member) says (`indexes`:
    file → Index, a cache of the other files' indexes); StateFileError naming both files when that file or member
    is missing."""
    file_name, member = link
    other = Path(path).parent / file_name
    indexes = {} if indexes is None else indexes
    try:
        if file_name not in indexes:
            indexes[file_name] = read_index(other)
        return read_member(other, indexes[file_name], member)
    except (FileNotFoundError, KeyError):
        raise StateFileError(f"{path} is corrupt: its {name!r} is kept in {other}, which does not hold it") from None


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every member of the file by name, and for a partition's file its links, read from the files they name (to
    inspect a file: `python -c` or a notebook). A previous file (LINKED_FILE) is a former partition file kept for
    its members: the links it still holds were settled when it was kept, so they are not read."""
    path = Path(path)
    index = read_index(path)
    arrays = {name: read_member(path, index, name) for name in index.members}
    if LINKED_FILE.fullmatch(path.name):
        return arrays
    return {**arrays, **{name: read_linked(path, name, link) for name, link in index.links.items()}}
