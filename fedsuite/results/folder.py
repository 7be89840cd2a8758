"""A run's folder: config.json, rounds.jsonl + rounds.csv (one row per round, flushed as it happens),
summary.json (rewritten every round), clients.log (full reasons of failed clients), accuracy.png, and a progress
line.

summary.json's `status` is `running` until the run ends, then one of STATUSES; `reason` says why a run that did
not complete stopped. One folder holds one run: the folder is claimed with an exclusive marker file, and a folder
that already holds a run is refused unless the run config says `overwrite=true`.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedsuite.config.import_paths import parse_import_path
from fedsuite.config.settings import value_of

# Final statuses, with the exit code simulation.run gives each (interrupted: 128 + the signal's number).
STATUSES = {"completed": 0, "budget-spent": 0, "pruned": 0, "failed": 1, "diverged": 3, "interrupted": 130}
# Runs that ended as their config asked: every round, or as many as dp-target-epsilon allowed (docs/privacy.md).
# Studies average them, reuse them and exit 0 for them.
FINISHED = ("completed", "budget-spent")
RUN_MARKER = ".fedsuite-run"
RUN_TOKEN_ENV = "FEDSUITE_RUN_TOKEN"  # set by simulation.run for every process of one launch
INITIAL_MODEL = "model-round-0.npy"  # x⁰, the flat trainable parameters every client starts from (float32)
RUN_FILES = ("config.json", "summary.json", "rounds.jsonl", "rounds.csv", "accuracy.png", "clients.log", "flwr.log",
             INITIAL_MODEL)  # fmt: skip

CSV_COLUMNS = (
    "round", "accuracy", "loss", "train_loss", "objective_gap", "relative_error", "round_seconds",
    "elapsed_seconds", "client_compute_seconds", "client_compute_max_seconds", "cohort", "replies",
    "rejected", "failures", "bytes_down_per_client", "bytes_up_per_client", "vectors_down_per_client",
    "vectors_up_per_client", "lr", "val_loss", "val_accuracy", "fed_loss", "fed_accuracy", "fed_accuracy_worst10",
    "fed_val_loss", "fed_val_accuracy", "fed_clients", "fed_skipped", "fed_failures",
)  # fmt: skip
# accuracies summary.json reports final and best values of, when a run has them (central test = final_accuracy)
EXTRA_ACCURACIES = ("fed_accuracy", "fed_accuracy_worst10", "val_accuracy", "fed_val_accuracy")

log = logging.getLogger("flwr.fedsuite")


RESERVE = ".fedsuite-reserve"  # room kept free while a run is running, so its final status can always be written
RESERVE_BYTES = 32 * 1024


class ResultsFolderTaken(FileExistsError):
    """The results folder already holds a run and overwrite was not asked for."""


class OutDirFull(OSError):
    """A results file could not be written for lack of space; what was written before is intact."""

    def __init__(self, message: str):
        super().__init__(message)
        self.errno = errno.ENOSPC


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OutDirFull) or (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT))


def full_message(folder: Path, name: str, err: OSError) -> str:
    """The one line a full out-dir is reported with (summary.json's reason, the console)."""
    return (f"out-dir {str(folder.parent)!r} is full: cannot write {name} ({err.strerror or err}); free space there "
            "or choose another out-dir")  # fmt: skip


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


SECRET_NOISE = "secret"  # the DP noise of a run is keyed by the OS's entropy (dp-noise-source='secure')
SEEDED_NOISE = "seeded: not private"  # … or drawn from the run seed config.json records (dp-noise-source='seeded')


def npy_bytes(array) -> bytes:
    """`array` in NumPy's .npy format (np.load reads it back)."""
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.asarray(array), allow_pickle=False)
    return out.getvalue()


def noise_label(config: dict[str, Any]) -> str | None:
    """What a run's rows and summary say of its DP noise (docs/privacy.md, Secret noise), or None when no DP
    mechanism is on."""
    if value_of(config, "dp") == "off" and not value_of(config, "dp-sgd"):
        return None
    return noise_source_label(value_of(config, "dp-noise-source"))


def noise_source_label(source: str) -> str:
    """The rows' and summary's `dp_noise` for noise drawn from `source` (run-config key dp-noise-source)."""
    return SEEDED_NOISE if source == "seeded" else SECRET_NOISE


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
        return (f"run-name={name!r}: must be one folder name inside out-dir (no '/', not '.' or '..'), e.g. "
                "run-name='scaffold-try1'; empty = a fresh folder")  # fmt: skip
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
    return (f"results folder {folder} holds files no fedsuite run wrote (it has no {RUN_MARKER} marker), and a run "
            "neither writes into nor clears such a folder, overwrite=true included; choose another run-name or "
            "out-dir")  # fmt: skip


def remove_run_files(folder: Path) -> None:
    """Remove what a fedsuite run wrote in `folder` (for overwrite=true): its result files, what an interrupted write
    left (remove_temporaries), and its checkpoints (round-<r> folders and latest.json, named as
    fedsuite.results.checkpoint
    names them); anything else in the folder, or in checkpoints/, stays."""
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
        marker.write_text(json.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(),
                                      "started": time.time(), "resumed": True}))  # fmt: skip
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
        _write_with_reserve(folder, path, strict_json(summary, indent=2))
    except OSError:
        return False
    release_room(folder)
    return True


def _write_with_reserve(folder: Path, path: Path, text: str) -> None:
    """write_atomic; on a full disk, release the run's reserve and try once more."""
    try:
        write_atomic(path, text)
    except OSError as err:
        if not is_disk_full(err) or not release_room(folder):
            raise
        write_atomic(path, text)


class RunRecorder:
    def __init__(
        self,
        folder: Path,
        config: dict[str, Any],
        meta: dict[str, Any],
        targets: list[float],
        num_rounds: int,
        overwrite: bool = False,
        resumed_rows: list[dict[str, Any]] | None = None,
        target_column: str = "accuracy",
        initial_model: Any = None,
    ):
        """`resumed_rows`: continue the run in `folder` from a checkpoint holding these rows
        (fedsuite.results.checkpoint);
        rows written after the checkpoint are dropped, as those rounds run again. `target_column`: the row column
        rounds-to-target reads (target-metric: accuracy, fed_accuracy, val_accuracy, fed_val_accuracy).
        `initial_model`: x⁰ (a flat NumPy array), written as model-round-0.npy for a check from outside the run."""
        self.folder = folder
        self.targets = targets
        self.target_column = target_column
        self.num_rounds = num_rounds
        self.rows: list[dict[str, Any]] = list(resumed_rows or [])
        self.noise = noise_label(config)  # every row and the summary say whether the DP noise is secret
        self.started = time.time() - (self.rows[-1].get("elapsed_seconds", 0.0) if self.rows else 0.0)
        self.status = "running"
        self.resume_command: str | None = None  # set once a checkpoint exists
        claim_folder(folder, overwrite, os.environ.get(RUN_TOKEN_ENV), resume=resumed_rows is not None)
        with self._writing("the run's files"):
            reserve_room(folder)
            write_atomic(folder / "config.json", json.dumps({"run_config": config, **meta}, indent=2, default=str))
            write_atomic(folder / "rounds.csv", _csv_lines([CSV_COLUMNS, *map(_csv_row, self.rows)]))
            if resumed_rows is not None:
                write_atomic(folder / "rounds.jsonl", "".join(strict_json(row) + "\n" for row in self.rows))
            if initial_model is not None:
                write_atomic(folder / INITIAL_MODEL, npy_bytes(initial_model))
            self.write_summary("running")

    def _writing(self, name: str):
        """Turns a full disk while writing `name` into OutDirFull with the one-line message."""
        return _DiskFull(self.folder, name)

    def record(self, row: dict[str, Any], status: str | None = None, reason: str | None = None) -> None:
        """Append a round's row; `status` ends the run (default: `completed` after the last round). The row goes
        into rounds.jsonl and rounds.csv both or neither (a full disk: OutDirFull, the files as they were)."""
        row = {"elapsed_seconds": round(time.time() - self.started, 3), **row}
        with self._writing("rounds.jsonl"):
            size = append_atomic(self.folder / "rounds.jsonl", strict_json(row) + "\n")
        try:
            with self._writing("rounds.csv"):
                append_atomic(self.folder / "rounds.csv", _csv_lines([_csv_row(row)]))
        except BaseException:
            os.truncate(self.folder / "rounds.jsonl", size)
            raise
        self.rows.append(row)
        log.info(progress_line(row, self.num_rounds))
        if status is None:
            status = "completed" if row["round"] >= self.num_rounds else "running"
        if status == "running":
            self.write_summary(status)
        else:
            self.finish(status, reason)

    def finish(self, status: str, reason: str | None = None) -> None:
        """Write the final summary (once) and the plot."""
        if self.status != "running":
            return
        self.write_summary(status, reason)
        summary = self.summary(status)
        if summary.get("no_better_than_initial"):
            log.warning("fedsuite │ warning: %s", summary["warnings"][0])
        log.info("fedsuite │ %s", closing_line(summary, self.folder))
        if reason and " is full: " in _plain_reason(self.folder, reason):
            release_room(self.folder)
            return  # no plot into a full out-dir (and no second line saying so)
        try:
            self.plot()
        except Exception as err:  # a missing plot must not hide the run's status
            if is_disk_full(err):
                err = full_message(self.folder, "accuracy.png", err)
            log.warning("fedsuite │ accuracy.png not written: %s", err)
        release_room(self.folder)

    def client_problem(self, server_round: int, who: str, reason: str, details: str = "") -> None:
        """Append a failed client's full reason (traceback) to clients.log; the console gets one line."""
        with self._writing("clients.log"):
            append_atomic(self.folder / "clients.log",
                          f"=== round {server_round} │ {who} │ {reason}\n{details.rstrip()}\n" if details else
                          f"=== round {server_round} │ {who} │ {reason}\n")  # fmt: skip

    def summary(self, status: str) -> dict[str, Any]:
        evaluated = [r for r in self.rows if r.get("accuracy") is not None and r["round"] > 0]
        trained = [r for r in self.rows if r["round"] > 0]
        best = max(evaluated, key=lambda r: r["accuracy"], default=None)
        out: dict[str, Any] = {
            "status": status,
            "rounds_completed": len(trained),
            "num_rounds": self.num_rounds,
            "final_accuracy": evaluated[-1]["accuracy"] if evaluated else None,
            "best_accuracy": best["accuracy"] if best else None,
            "best_round": best["round"] if best else None,
            "final_loss": evaluated[-1].get("loss") if evaluated else None,
            "target_metric": self.target_column,
            "rounds_to_target": self.rounds_to_target(),
            "total_seconds": round(time.time() - self.started, 3),
            "first_round_seconds": trained[0].get("round_seconds") if trained else None,
            "steady_round_seconds": steady_seconds(self.rows),
            "communication_bytes_per_client": sum(
                (r.get("bytes_down_per_client") or 0) + (r.get("bytes_up_per_client") or 0) for r in trained
            ),
            "communication_vectors_per_client": sum(
                (r.get("vectors_down_per_client") or 0) + (r.get("vectors_up_per_client") or 0) for r in trained
            ),
        }
        for column in EXTRA_ACCURACIES:
            having = [r for r in trained if r.get(column) is not None]
            if having:
                out[f"final_{column}"] = having[-1][column]
                out[f"best_{column}"] = max(r[column] for r in having)
        for column in ("fed_loss", "val_loss", "fed_val_loss"):
            having = [r for r in trained if r.get(column) is not None]
            if having:
                out[f"final_{column}"] = having[-1][column]
        out.update(against_initial(self.rows))
        if self.noise is not None:
            out["dp_noise"], out["private"] = self.noise, self.noise == SECRET_NOISE
        participation = lost_participation(trained)
        if participation is not None:
            out["participation"] = participation
        if self.resume_command:
            out["resume_command"] = self.resume_command
        with_error = [r for r in self.rows if r.get("relative_error") is not None]
        if with_error:
            out["final_relative_error"] = with_error[-1]["relative_error"]
            out["final_objective_gap"] = with_error[-1]["objective_gap"]
        return out

    def rounds_to_target(self) -> dict[str, int | None]:
        """The first trained round whose target-metric column reaches each target (None: never)."""
        column = self.target_column
        evaluated = [r for r in self.rows if r.get(column) is not None and r["round"] > 0]
        return {f"{t:g}": next((r["round"] for r in evaluated if r[column] >= t), None) for t in self.targets}

    def write_summary(self, status: str, reason: str | None = None) -> None:
        """Replace summary.json atomically. The final status of a run may use the reserve (a full disk must not
        leave `running` behind); a `running` summary that cannot be written is OutDirFull (the old one stays)."""
        out = self.summary(status)
        if reason:
            out["reason"] = _plain_reason(self.folder, reason)
        text = strict_json(out, indent=2)
        with self._writing("summary.json"):
            if status == "running":
                write_atomic(self.folder / "summary.json", text)
            else:
                _write_with_reserve(self.folder, self.folder / "summary.json", text)
        self.status = status

    def plot(self) -> None:
        draw_plot(self.folder, self.rows)


SYSTEM_COLUMNS = ("steps_mean", "dropped", "late", "unavailable")  # the system models' row columns


def _plot_systems(ax, rows: list[dict[str, Any]]) -> None:
    """What the system models did each round (docs/running/systems.md): the replies' K_i (mean, min–max band) and,
    on a second axis, the clients dropped, late and unavailable."""
    trained = [r for r in rows if r["round"] > 0]
    steps = [r for r in trained if r.get("steps_mean") is not None]
    if steps:
        t = [r["round"] for r in steps]
        ax.plot(t, [r["steps_mean"] for r in steps], color="C0", label="mean K_i")
        ax.fill_between(t, [r["steps_min"] for r in steps], [r["steps_max"] for r in steps], color="C0", alpha=0.2)
        ax.set_ylabel("local steps K_i (min–max band)")
    counts = [key for key in ("dropped", "late", "unavailable") if any(key in r for r in trained)]
    if counts:
        other = ax.twinx() if steps else ax
        for n, key in enumerate(counts, 1):
            other.step([r["round"] for r in trained], [r.get(key, 0) for r in trained], where="mid",
                       color=f"C{n}", label=key)  # fmt: skip
        other.set_ylabel("clients")
        other.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("round")


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


def against_initial(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The initial model's test figures (round 0) and whether the last evaluated model is no better: its test loss
    not below the initial one, or its accuracy not above it. A run that blew up and settled back at chance
    can end `completed`; this says so (summary.json `no_better_than_initial` and `warnings`, and the console)."""
    start = next((r for r in rows if r["round"] == 0), {})
    out: dict[str, Any] = {"initial_accuracy": start.get("accuracy"), "initial_loss": start.get("loss")}
    evaluated = [r for r in rows if r["round"] > 0 and (r.get("loss") is not None or r.get("accuracy") is not None)]
    if not evaluated or (start.get("loss") is None and start.get("accuracy") is None):
        return out
    last = evaluated[-1]
    said = []

    def finite(*values) -> bool:
        return all(v is not None and math.isfinite(v) for v in values)

    if finite(last.get("loss"), start.get("loss")) and last["loss"] >= start["loss"]:
        said.append(f"test loss {last['loss']:.4g} vs {start['loss']:.4g}")
    if finite(last.get("accuracy"), start.get("accuracy")) and last["accuracy"] <= start["accuracy"]:
        said.append(f"accuracy {last['accuracy']:.4f} vs {start['accuracy']:.4f}")
    out["no_better_than_initial"] = bool(said)
    if said:
        out["warnings"] = [
            f"the model of round {last['round']} is no better than the initial model ({'; '.join(said)} at round "
            "0): the run learned nothing (a too large lr that blew up the first rounds?)"
        ]
    return out


def lost_participation(trained: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cohorts' replies that did not count (failed or lost clients, rejected replies), with the rounds they
    were lost in; None when no round names its cohort (a run without rounds yet)."""
    rounds = [r for r in trained if r.get("cohort")]
    if not rounds:
        return None
    expected = sum(int(r["cohort"]) for r in rounds)
    valid = sum(int(r.get("replies") or 0) for r in rounds)
    short = [r["round"] for r in rounds if int(r.get("replies") or 0) < int(r["cohort"])]
    return {
        "expected_replies": expected,
        "valid_replies": valid,
        "rejected": sum(int(r.get("rejected") or 0) for r in rounds),
        "failed": sum(int(r.get("failures") or 0) for r in rounds),
        "rounds_with_lost_replies": len(short),
        "first_rounds_with_lost_replies": short[:20],
    }


def closing_line(summary: dict[str, Any], folder: Path) -> str:
    """The one line a run ends with: status, final and best accuracy (or loss), rounds, lost replies, a warning
    when the model is no better than the initial one, and the results folder."""
    parts = [f"run {summary.get('status', 'unknown')}"]
    if summary.get("final_accuracy") is not None:
        best = f", best {summary['best_accuracy']:.4f} at round {summary['best_round']}" if summary.get(
            "best_accuracy") is not None else ""  # fmt: skip
        parts.append(f"final accuracy {summary['final_accuracy']:.4f}{best}")
    elif summary.get("final_loss") is not None:
        parts.append(f"final loss {summary['final_loss']:.4g}")
    parts.append(f"{summary.get('rounds_completed', 0)}/{summary.get('num_rounds', '?')} rounds")
    lost = summary.get("participation") or {}
    if lost.get("rounds_with_lost_replies"):
        missing = lost["expected_replies"] - lost["valid_replies"]
        parts.append(f"{missing} of {lost['expected_replies']} client replies lost in "
                     f"{lost['rounds_with_lost_replies']} round(s) (clients.log)")  # fmt: skip
    if summary.get("no_better_than_initial"):
        parts.append("no better than the initial model")
    parts.append(f"results: {folder}")
    return " │ ".join(parts)


def read_closing_line(folder: Path) -> str:
    """closing_line from the run's summary.json (`results: <folder>` alone when there is none)."""
    try:
        return closing_line(json.loads((folder / "summary.json").read_text()), folder)
    except (OSError, ValueError, TypeError):
        return f"results: {folder}"


class _DiskFull:
    """Context manager: an OSError of a full disk becomes OutDirFull naming the out-dir and the file."""

    def __init__(self, folder: Path, name: str):
        self.folder, self.name = folder, name

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is not None and not isinstance(err, OutDirFull) and is_disk_full(err):
            raise OutDirFull(full_message(self.folder, self.name, err)) from None
        return False


def _plain_reason(folder: Path, reason: str) -> str:
    """A full disk's reason in the words of full_message, without the exception's class name in front."""
    if reason.startswith(f"{OutDirFull.__name__}: "):
        return reason[len(OutDirFull.__name__) + 2 :]
    if "[Errno 28]" in reason and " is full: " not in reason:
        return f"out-dir {str(folder.parent)!r} is full: {reason}; free space there or choose another out-dir"
    return reason


def _csv_row(row: dict[str, Any]) -> list:
    return ["" if row.get(c) is None else row.get(c) for c in CSV_COLUMNS]


def _csv_lines(rows) -> str:
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    for row in rows:
        writer.writerow(row)
    return out.getvalue()


def progress_line(row: dict[str, Any], num_rounds: int) -> str:
    parts = [f"round {row['round']:>{len(str(num_rounds))}}/{num_rounds}"]
    if row.get("accuracy") is not None:
        parts.append(f"acc {row['accuracy']:.4f}")
    if row.get("loss") is not None:
        parts.append(f"loss {row['loss']:.4f}")
    if row.get("fed_accuracy") is not None:
        parts.append(f"fed acc {row['fed_accuracy']:.4f} (worst 10% {row['fed_accuracy_worst10']:.4f})")
    elif row.get("fed_loss") is not None:
        parts.append(f"fed loss {row['fed_loss']:.4f}")
    if row.get("relative_error") is not None:
        parts.append(f"rel.err {row['relative_error']:.3e}")
    if row.get("train_loss") is not None:
        parts.append(f"train {row['train_loss']:.4f}")
    if row.get("round_seconds") is not None:
        parts.append(f"{row['round_seconds']:.2f} s")
    if row.get("cohort"):
        bad = (row.get("rejected") or 0) + (row.get("failures") or 0)
        parts.append(f"{row.get('replies', 0)}/{row['cohort']} clients" + (f" ({bad} dropped)" if bad else ""))
    if row.get("bytes_up_per_client"):
        parts.append(f"↓{row['bytes_down_per_client'] / 1e6:.2f} ↑{row['bytes_up_per_client'] / 1e6:.2f} MB/client")
    return "fedsuite │ " + " │ ".join(parts)


def steady_seconds(rows: Iterable[dict[str, Any]], key: str = "round_seconds", skip_last: bool = False) -> float | None:
    """THE steady time per round, used by summary.json, the study reports and the benchmark: the median (mean of the
    middle two for an even count) of `key` over every trained round (round > 0) but the first, which is the cold
    start (imports, data loads, Ray start). `skip_last` also leaves out the last round, for runs that evaluate on the
    test set only there (simulation.benchmarks.overhead). Missing and non-finite values are ignored; None when no
    round is left."""
    trained = [r for r in rows if r["round"] > 0]
    steady = trained[1:-1] if skip_last else trained[1:]
    values = sorted(v for v in (r.get(key) for r in steady) if v is not None and math.isfinite(v))
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def draw_plot(folder: Path, rows: list[dict[str, Any]]) -> None:
    """accuracy.png of `folder` from its rows (docs/reference/results-folder.md#accuracypng)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    acc = [(r["round"], r["accuracy"]) for r in rows if r.get("accuracy") is not None]
    fed = [(r["round"], r["fed_accuracy"]) for r in rows if r.get("fed_accuracy") is not None]
    err = [(r["round"], r["relative_error"]) for r in rows if r.get("relative_error") is not None]
    clients = next((r for r in reversed(rows) if r.get("fed_client_accuracy")), None)
    curves = [(points, label) for points, label in ((acc, "central test"), (fed, "federated")) if points]
    systems = any(k in r for r in rows for k in SYSTEM_COLUMNS)
    panels = [kind for kind, have in (("accuracy", curves), ("error", err), ("clients", clients),
                                      ("systems", systems)) if have]  # fmt: skip
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, kind in zip(axes[0], panels, strict=True):
        if kind == "accuracy":
            for points, label in curves:
                ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
            ax.set(xlabel="round", ylabel="accuracy")
            if len(curves) > 1 or fed:
                ax.legend()
        elif kind == "error":
            ax.plot(*zip(*err, strict=True), marker="o", markersize=3)
            ax.set(xlabel="round", ylabel="‖x − x*‖ / ‖x*‖", yscale="log")
        elif kind == "clients":
            ax.hist(list(clients["fed_client_accuracy"].values()), bins=10, range=(0.0, 1.0))
            ax.set(xlabel=f"client accuracy (round {clients['round']})", ylabel="clients")
        else:
            _plot_systems(ax, rows)
        if kind != "clients":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        ax.grid(alpha=0.3)
    fig.suptitle(folder.name, fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    write_atomic(folder / "accuracy.png", png.getvalue())


def draw_missing_plot(folder: Path) -> bool:
    """Draw accuracy.png from rounds.jsonl when a run ended without it (a signal that arrived while the run wrote
    its end); True if it was drawn."""
    if (folder / "accuracy.png").exists() or not (folder / "rounds.jsonl").is_file():
        return False
    rows = []
    for line in (folder / "rounds.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    draw_plot(folder, rows)
    return True
