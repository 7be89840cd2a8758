"""A checkpoint folder's manifest: every file's size and SHA-256, so a truncated or altered file is named.

`seal(folder)` lists every file below a finished checkpoint folder (client-state snapshot included) with its
size and digest in `manifest.json`, written atomically (a temporary file renamed into place; nothing is left on
failure). fedsuite.results.checkpoint seals the temporary folder just before renaming it into place, so a checkpoint
folder without a manifest was cut short. `verify(folder)` checks that every listed file is there with its size
and digest and that no file was added (an extra `partition-*` file would be restored as client state), and raises
CheckpointError naming the first bad file and what is wrong with it. Paths are checked in sorted order.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from fedsuite.results.folder import write_atomic

MANIFEST = "manifest.json"
FORMAT = 1
CHUNK = 1 << 20


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, is damaged, or does not fit the run that wants to resume from it
    (fedsuite.results.checkpoint raises it too)."""


def _error(message: str) -> Exception:
    return CheckpointError(message)


def _files(folder: Path) -> list[str]:
    """Every file below `folder` (relative POSIX paths, sorted), the manifest and its temporaries left out."""
    found = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in names:
            rel = (Path(root) / name).relative_to(folder).as_posix()
            if rel == MANIFEST or (rel.startswith(f".{MANIFEST}.") and rel.endswith(".tmp")):
                continue
            found.append(rel)
    return sorted(found)


def seal(folder: Path) -> Path:
    """Write `folder`/manifest.json listing every file below `folder` with its size and SHA-256; returns its path.
    Written to a temporary file, flushed to disk and renamed: a failure (a full disk) leaves no manifest and no
    temporary file, and raises."""
    folder = Path(folder)
    files = {}
    for rel in _files(folder):
        path = folder / rel
        files[rel] = {"size": path.stat().st_size, "sha256": digest(path)}
    text = json.dumps({"format": FORMAT, "files": files}, indent=1)
    target = folder / MANIFEST
    write_atomic(target, text)  # temporary .manifest.json.<hex>.tmp, flushed, renamed; removed on failure
    return target


def verify(folder: Path) -> None:
    """Check every file `folder`/manifest.json lists (present, size, SHA-256) and that there are no others; raises
    CheckpointError naming the first bad file and what is wrong. A folder without a manifest is an error too."""
    folder = Path(folder)
    manifest = folder / MANIFEST
    way_out = "resume from another copy of the run, or start it again"
    try:
        listed = json.loads(manifest.read_text())["files"]
        if not isinstance(listed, dict):
            raise ValueError("'files' is not a mapping")
    except FileNotFoundError:
        raise _error(f"checkpoint file {manifest} is missing: the checkpoint was not sealed (cut short, or "
                              f"written by an older version); {way_out}") from None  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise _error(f"checkpoint file {manifest} is corrupt ({type(err).__name__}: {err}); "
                              f"{way_out}") from None  # fmt: skip
    present = set(_files(folder))
    for rel in sorted(set(listed) | present):
        path = folder / rel
        if rel not in listed:
            raise _error(f"checkpoint file {path} is not in the manifest (added after the checkpoint was "
                                  f"written); remove it, or {way_out}")  # fmt: skip
        if rel not in present:
            raise _error(f"checkpoint file {path} is missing; {way_out}")
        try:
            want_size, want_digest = int(listed[rel]["size"]), str(listed[rel]["sha256"])
        except (KeyError, TypeError, ValueError):
            raise _error(f"checkpoint file {manifest} is corrupt (bad entry for {rel}); {way_out}") from None
        size = path.stat().st_size
        if size != want_size:
            raise _error(f"checkpoint file {path} is corrupt: {size} bytes, the manifest says {want_size}"
                                  f"{' (truncated)' if size < want_size else ''}; {way_out}")  # fmt: skip
        if digest(path) != want_digest:
            raise _error(f"checkpoint file {path} is corrupt: its SHA-256 differs from the manifest's "
                                  f"(same size, changed content); {way_out}")  # fmt: skip
