"""The `files` tier: one partition's client state in one file, `partition-<id>.state` (fedsuite.state.files), in
the folder the run's StatePlan chose (a RAM folder for memory state, a disk folder otherwise;
docs/running/scale.md#where-client-state-lives).

A client's vectors are created lazily (zeros) on its first participation, loaded once per fit and written back once
after it, replaced atomically. Never in a node's Flower Context.state: a SuperNode trains many partitions, and
Flower's simulation engine may run two messages of one node on two workers at once and write the node's
Context back last-write-wins, which would lose one partition's update.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import numpy as np

from fedsuite.codec.npy_bytes import member_names as npz_members
from fedsuite.codec.npy_bytes import read_member as read_npz_member
from fedsuite.state import folders
from fedsuite.state.files import (
    Index,
    StateFileError,
    read_index,
    read_linked,
    read_member,
    write_state_file,
)
from fedsuite.state.folders import LEGACY_SUFFIX, OWNER, STATE_SUFFIX
from fedsuite.state.tier import StateTier

_UNREAD = object()  # a member of the partition's file not read yet


class FileTier(StateTier):
    """Named arrays of one partition in `root/partition-<id>.state` (fedsuite.state.files: raw bytes after a small
    header); the file is replaced atomically. A member is read from the file when it is first asked for, so one that
    is only deleted (the previous vectors of a write the server confirmed, fedsuite.state.tier.settle) is never read. A
    partition with only a `.npz` file of an earlier version is read from it, and its first write replaces it.

    The previous vectors of a write are not written again: `keep_previous` marks a vector that still holds the
    file's own bytes, and `flush` then keeps that file under a second name (a hard link, no copy), one of the
    partition's two names `previous-<id>-a.state` and `-b.state` that the file does not link to, and writes a link
    to it in the new file's header. Once the new file is in place, a kept name it does not link to is removed, so a
    partition holds at most its file and two kept files, and a crash at any step leaves the state it replaced."""

    name = "files"

    def __init__(self, root: Path, partition_id: int, owner_key: int | str | None = None):
        """`owner_key`: the run's state key, recorded as the folder's owner (claim) before its first file."""
        stem = Path(root) / f"partition-{partition_id:06d}"
        self.path, self.legacy = stem.with_suffix(STATE_SUFFIX), stem.with_suffix(LEGACY_SUFFIX)
        self.kept_names = tuple(f"previous-{partition_id:06d}-{tag}{STATE_SUFFIX}" for tag in "ab")
        self.owner_key = owner_key
        self._arrays: dict[str, np.ndarray] | None = None
        self._index: Index | None = None  # self.path as loaded (or last written); None: read from self.legacy
        self._links: dict[str, tuple[str | None, str]] = {}  # key → (kept file; None: self.path as loaded, member)
        self._held: dict[str, np.ndarray] = {}  # a linked key's value where it was in memory when marked
        self._own: set[str] = set()  # keys whose value is still the loaded file's own member
        self._indexes: dict[str, Index] = {}  # kept file → its index

    @classmethod
    def check_owner(cls, root: Path, state_key: int | str | None, key: str = "client-state-dir") -> None:
        folders.check_owner(root, state_key, key)

    @classmethod
    def claim(cls, root: Path, state_key: int | str, results: str | None = None, key: str = "client-state-dir") -> None:
        folders.claim(root, state_key, results, key)

    def _load(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = {}
            if self.path.is_file():
                self._index = read_index(self.path)
                self._arrays = dict.fromkeys([*self._index.members, *self._index.links], _UNREAD)
                self._links = dict(self._index.links)
                self._own = set(self._index.members)
            elif self.legacy.is_file():
                self._arrays = dict.fromkeys(npz_members(self.legacy), _UNREAD)
        return self._arrays

    def __getitem__(self, key):
        arrays = self._load()
        value = arrays[key]
        if value is _UNREAD:
            if key in self._links:
                file, member = self._links[key]
                value = self._held.get(key)
                if value is None and file is None:  # a member of the file as loaded, marked by keep_previous
                    value = read_member(self.path, self._index, member)
                elif value is None:
                    value = read_linked(self.path, key, (file, member), self._indexes)
            elif self._index is not None:
                value = read_member(self.path, self._index, key)
            else:  # a copy, writable as a value read from a .state file is
                value = read_npz_member(self.legacy, key).copy()
            arrays[key] = value
        return value

    def __setitem__(self, key, value):
        self._load()[key] = value
        self._forget(key)

    def __delitem__(self, key):
        del self._load()[key]
        self._forget(key)

    def _forget(self, key) -> None:
        self._own.discard(key)
        self._links.pop(key, None)
        self._held.pop(key, None)

    def keep_previous(self, name: str, key: str) -> bool:
        """Make `key` the current value of `name` without copying it, where that value is still the file's own
        member: the next flush keeps the file and links to it. False where it is not (then copy it)."""
        arrays = self._load()
        if name not in self._own or self._index is None:
            return False
        value = arrays[name]
        arrays[key] = _UNREAD
        self._forget(key)
        self._links[key] = (None, name)
        if value is not _UNREAD:
            self._held[key] = value  # a reference, no copy: the value if the file is replaced meanwhile
        return True

    def flush(self) -> None:
        """Replace the file at once: written beside it and renamed; a failure at any byte (a full disk) removes
        the temporary file and leaves the previous file as it was. Keys keep_previous marked become links to the
        file as loaded, kept under a free kept name (copied where none is free, where the file was replaced since
        it was loaded and their values are in memory, or where the file system has no hard links). A `.npz` file of
        an earlier version, and kept files no longer linked to, go once the new file is in place."""
        arrays = self._load()
        root = self.path.parent
        root.mkdir(parents=True, exist_ok=True)
        if self.owner_key is not None and not (root / OWNER).is_file():
            folders.claim(root, self.owner_key)
        older = {key: link for key, link in self._links.items() if link[0] is not None}  # settled: none
        marked = {key: member for key, (file, member) in self._links.items() if file is None}
        on_disk = {file for file, _ in self._index.links.values()} if self._index is not None else set()
        free = [name for name in self.kept_names if name not in on_disk | {file for file, _ in older.values()}]
        keep = free[0] if marked and free else None
        if keep is not None and _identity(self.path) != self._index.identity:  # replaced since it was loaded
            if not marked.keys() <= self._held.keys():
                raise StateFileError(f"{self.path} changed while it was read (replaced by another writer?)")
            keep = None  # copied from memory
        created = keep is not None and _link_into_place(self.path, root / keep)  # the file as loaded, kept
        links = {**older, **({key: (keep, member) for key, member in marked.items()} if created else {})}
        try:
            values = {key: self[key] for key in arrays if key not in links}  # members not read yet are read now
            fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{self.path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    write_state_file(f, values, links)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except BaseException:
            if created:
                (root / keep).unlink(missing_ok=True)  # nothing links to it: the file as loaded is still in place
            raise
        linked = {file for file, _ in links.values()}
        for name in self.kept_names:  # kept files no file links to (the last write's, or a crash's)
            if name not in linked:
                (root / name).unlink(missing_ok=True)
                self._indexes.pop(name, None)
        self.legacy.unlink(missing_ok=True)
        # the file just written is the one a later keep_previous of this store links to
        self._index, self._links, self._held, self._own = read_index(self.path), links, {}, set(values)


def _identity(path: Path) -> tuple[int, int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size


NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS, errno.EOPNOTSUPP}


def _link_into_place(source: Path, target: Path) -> bool:
    """`target` becomes another name of `source`'s file; False where the file system has no hard links. No file
    links to `target` (FileTier.flush picks it so): what is there (a crash's leftover) is removed first."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError as err:
        if err.errno in NO_HARD_LINKS:
            return False
        raise
    return True
