"""A run's results folder: its name (`default_run_name`, `run_name_problem`), taking it for one run with an
exclusive marker file (`claim_folder`; a folder that already holds a run is refused unless the run config says
`overwrite=true`, one no run made always), clearing what a run or an interrupted write left in it, and setting the
status of a run that stopped without saying so (`mark_stopped`).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from fedsuite.config.import_paths import parse_import_path
from fedsuite.results.writing import RESERVE, release_room, strict_json, write_with_reserve

RUN_MARKER = ".fedsuite-run"
RUN_TOKEN_ENV = "FEDSUITE_RUN_TOKEN"  # set by simulation.run for every process of one launch
INITIAL_MODEL = "model-round-0.npy"  # x⁰, the flat trainable parameters every client starts from (float32)
RUN_FILES = (
    "config.json",
    "summary.json",
    "rounds.jsonl",
    "rounds.csv",
    "accuracy.png",
    "clients.log",
    "flwr.log",
    INITIAL_MODEL,
)


class ResultsFolderTaken(FileExistsError):
    """The results folder already holds a run and overwrite was not asked for."""


def remove_temporaries(folder: Path, older_than: float | None = None) -> list[Path]:
    """Remove what an interrupted write can leave in a results folder whose run has ended: temporary files of
    results and checkpoints, the reserve, half-built checkpoint folders (only those last changed before
    `older_than`, a time.time(), if given: a new launch may already be writing). Returns what was removed."""
    import shutil

    found = [folder / RESERVE, folder / "summary.json.tmp", folder / "summary.json.stop"]
    found += folder.glob(".*.tmp")
    found += folder.glob(".fedsuite-write-check-*")
    ckpt = folder / "checkpoints"
    found += ckpt.glob(".round-*.tmp")
    found += ckpt.glob(".latest.json.*")
    for sub in ckpt.glob("round-*"):
        found += sub.glob(".*.tmp")
    removed = []
    for path in found:
        try:
            if older_than is not None and path.lstat().st_mtime >= older_than:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


def default_run_name(algorithm: str, dataset: str) -> str:
    """<algorithm>-<dataset>-<date-time>-<random>: unique across processes started in the same second. An import
    path ('pkg.module:loader') contributes its last name only, so the folder name stays a plain word."""
    path = parse_import_path(dataset)
    dataset = dataset if path is None else path.name
    return f"{algorithm}-{dataset}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot be a run-name, or None: it must be one folder name inside out-dir (or '' for a fresh one),
    so a run never writes, or with overwrite=true removes, anything outside the out-dir it was given."""
    if name == "":
        return None
    if name in (".", "..") or "/" in name or (os.altsep and os.altsep in name) or "\0" in name:
        return (
            f"run-name={name!r}: must be one folder name inside out-dir (no '/', not '.' or '..'), e.g. "
            "run-name='scaffold-try1'; empty = a fresh folder"
        )
    if len(os.fsencode(name)) > 255:
        return f"run-name: {len(os.fsencode(name))} bytes long; a folder name holds at most 255"
    return None


def holds_run(folder: Path) -> bool:
    return (folder / RUN_MARKER).exists() or any((folder / name).exists() for name in RUN_FILES[:3])


def made_by_a_run(folder: Path) -> bool:
    """Whether `folder` is free for a run: missing, empty, or marked as a fedsuite run's folder."""
    try:
        return (folder / RUN_MARKER).exists() or not any(folder.iterdir())
    except FileNotFoundError:
        return True


def taken_message(folder: Path) -> str:
    return (
        f"results folder {folder} already holds a run; choose another run-name, leave run-name empty for a "
        "fresh folder, or pass overwrite=true to replace it"
    )


def foreign_message(folder: Path) -> str:
    return (
        f"results folder {folder} holds files no fedsuite run wrote (it has no {RUN_MARKER} marker), and a run "
        "neither writes into nor clears such a folder, overwrite=true included; choose another run-name or "
        "out-dir"
    )


def remove_run_files(folder: Path) -> None:
    """Remove what a fedsuite run wrote in `folder` (for overwrite=true): its result files, what an interrupted write
    left (remove_temporaries), and its checkpoints (round-<r> folders and latest.json, named as
    fedsuite.results.checkpoint names them); anything else in the folder, or in checkpoints/, stays."""
    import re
    import shutil

    remove_temporaries(folder)
    for name in RUN_FILES:
        (folder / name).unlink(missing_ok=True)
    ckpt = folder / "checkpoints"
    if not ckpt.is_dir() or ckpt.is_symlink():
        return
    for path in ckpt.iterdir():
        if path.name == "latest.json" and not path.is_dir():
            path.unlink(missing_ok=True)
        elif re.fullmatch(r"round-\d{6,}", path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
    try:
        ckpt.rmdir()  # only when nothing else is left in it
    except OSError:
        pass


def claim_folder(folder: Path, overwrite: bool, token: str | None = None, resume: bool = False) -> None:
    """Create `folder` and take it for this run, atomically (two runs racing for one name: one wins).

    `token` identifies one launch of simulation.run: the driver claims the folder before Flower starts, and the
    ServerApp it launched (same token in its environment) finds the claim its own."""
    if (problem := run_name_problem(folder.name)) is not None or folder.name in ("", ".", ".."):
        raise ResultsFolderTaken(problem or f"results folder {folder}: must end in one folder name (run-name)")
    marker = folder / RUN_MARKER
    if token and _marker(marker).get("token") == token:
        return
    if not made_by_a_run(folder):
        raise ResultsFolderTaken(foreign_message(folder))
    folder.mkdir(parents=True, exist_ok=True)
    if resume:  # continuing the run that is in the folder (resume-from): take it over, keep its files
        claim = {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        marker.write_text(json.dumps({**claim, "resumed": True}))
        return
    if holds_run(folder) and not overwrite:
        raise ResultsFolderTaken(taken_message(folder))
    flags = os.O_CREAT | os.O_WRONLY | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(marker, flags)
    except FileExistsError:
        raise ResultsFolderTaken(taken_message(folder)) from None
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}))
    if overwrite:  # the replaced run's files and its checkpoints (else a resume hint could name the old run's)
        remove_run_files(folder)


def _marker(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def mark_stopped(folder: Path, status: str, reason: str, stopped_at: float | None = None) -> bool:
    """Set a summary that still says `running` to `status` (a driver that outlived its run); True if changed.
    With `stopped_at` (when the stop began, time.time()), a summary that says `failed` and was written at or after
    that moment is set too: the failure came of the stop (a simulation worker the stop killed before the ServerApp
    noticed the signal), and its reason is kept after the new one.
    A full disk is met with the run's reserve; if even so the summary cannot be written it stays as it was
    (whole) and False is returned: the caller says it on the console."""
    path = folder / "summary.json"
    try:
        summary = json.loads(path.read_text())
        written = path.stat().st_mtime
    except (OSError, ValueError):
        return False
    if summary.get("status") == "running":
        summary.update(status=status, reason=reason)
    elif summary.get("status") == "failed" and stopped_at is not None and written >= stopped_at:
        summary.update(status=status, reason=f"{reason} (the run then reported: {summary.get('reason')})")
    else:
        return False
    try:
        write_with_reserve(folder, path, strict_json(summary, indent=2))
    except OSError:
        return False
    release_room(folder)
    return True
