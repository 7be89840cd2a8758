"""How a results file is written: whole or not at all (`write_atomic`, `append_atomic`), as JSON every parser reads
(`strict_json`) or as .npy bytes, and a full out-dir met with the run's reserve (room kept allocated while a run
runs, so its final status can always be written) and reported in one line (`OutDirFull`, `full_message`).
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import uuid
from pathlib import Path
from typing import Any

RESERVE = ".fedsuite-reserve"  # room kept free while a run is running, so its final status can always be written
RESERVE_BYTES = 32 * 1024


class OutDirFull(OSError):
    """A results file could not be written for lack of space; what was written before is intact."""

    def __init__(self, message: str):
        super().__init__(message)
        self.errno = errno.ENOSPC


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OutDirFull) or (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT))


def full_message(folder: Path, name: str, err: OSError) -> str:
    """The one line a full out-dir is reported with (summary.json's reason, the console)."""
    return (
        f"out-dir {str(folder.parent)!r} is full: cannot write {name} ({err.strerror or err}); free space there "
        "or choose another out-dir"
    )


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace `path` with `data` all at once: written to a temporary file beside it, flushed to disk, renamed
    over it. On any failure (a full disk at any byte) the temporary file is removed and `path` is unchanged."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_atomic(path: Path, text: str) -> int:
    """Append `text` to `path` whole or not at all: a failed write (a full disk) is cut off again, so the file
    ends where it ended before. Returns the file's size before the append (to take it back: os.truncate)."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.ftruncate(fd, size)
            raise
        return size
    finally:
        os.close(fd)


def reserve_room(folder: Path) -> None:
    """Keep RESERVE_BYTES allocated in `folder` while a run runs (released to write its last status)."""
    path = folder / RESERVE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        finally:
            os.close(fd)
    except OSError as err:
        path.unlink(missing_ok=True)
        if is_disk_full(err):
            raise OutDirFull(full_message(folder, RESERVE, err)) from None
        if err.errno != errno.EOPNOTSUPP:
            raise


def release_room(folder: Path) -> bool:
    """Free the reserve; True if there was one."""
    try:
        (folder / RESERVE).unlink()
        return True
    except OSError:
        return False


def write_with_reserve(folder: Path, path: Path, text: str) -> None:
    """write_atomic; on a full disk, release the run's reserve and try once more."""
    try:
        write_atomic(path, text)
    except OSError as err:
        if not is_disk_full(err) or not release_room(folder):
            raise
        write_atomic(path, text)


class DiskFull:
    """Context manager: an OSError of a full disk becomes OutDirFull naming the out-dir and the file."""

    def __init__(self, folder: Path, name: str):
        self.folder, self.name = folder, name

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is not None and not isinstance(err, OutDirFull) and is_disk_full(err):
            raise OutDirFull(full_message(self.folder, self.name, err)) from None
        return False


def plain_reason(folder: Path, reason: str) -> str:
    """A full disk's reason in the words of full_message, without the exception's class name in front."""
    if reason.startswith(f"{OutDirFull.__name__}: "):
        return reason[len(OutDirFull.__name__) + 2 :]
    if "[Errno 28]" in reason and " is full: " not in reason:
        return f"out-dir {str(folder.parent)!r} is full: {reason}; free space there or choose another out-dir"
    return reason


def strict_json(value: Any, **kwargs) -> str:
    """JSON that every parser reads: a non-finite float (a diverged run's loss) is written as null."""
    return json.dumps(_finite(value), allow_nan=False, **kwargs)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def npy_bytes(array) -> bytes:
    """`array` in NumPy's .npy format (np.load reads it back)."""
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.asarray(array), allow_pickle=False)
    return out.getvalue()
