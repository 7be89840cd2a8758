"""A run's folder as the run writes it (`RunRecorder`): config.json, rounds.jsonl + rounds.csv (one row per round,
flushed as it happens), summary.json (rewritten every round), clients.log (full reasons of failed clients),
accuracy.png, and a progress line.

summary.json's `status` is `running` until the run ends, then one of STATUSES; `reason` says why a run that did
not complete stopped. One folder holds one run: the folder is claimed with an exclusive marker file, and a folder
that already holds a run is refused unless the run config says `overwrite=true` (fedsuite/results/run_folder.py).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

# Besides what it uses, this module hands on the names it held before its parts moved out (marked F401), which
# fedsuite.results forwards from here (fedsuite/moved.py): the run folder and its claim (run_folder.py), what a run
# says of itself (summaries.py), how its files are written (writing.py) and its plot (plot.py).
from fedsuite.config.import_paths import parse_import_path  # noqa: F401
from fedsuite.config.settings import value_of  # noqa: F401
from fedsuite.results.plot import SYSTEM_COLUMNS, draw_missing_plot, draw_plot  # noqa: F401
from fedsuite.results.run_folder import (  # noqa: F401
    INITIAL_MODEL,
    RUN_FILES,
    RUN_MARKER,
    RUN_TOKEN_ENV,
    ResultsFolderTaken,
    claim_folder,
    default_run_name,
    foreign_message,
    holds_run,
    made_by_a_run,
    mark_stopped,
    remove_run_files,
    remove_temporaries,
    run_name_problem,
    taken_message,
)
from fedsuite.results.summaries import (  # noqa: F401
    FINISHED,
    SECRET_NOISE,
    SEEDED_NOISE,
    STATUSES,
    against_initial,
    closing_line,
    lost_participation,
    noise_label,
    noise_source_label,
    progress_line,
    read_closing_line,
    steady_seconds,
)
from fedsuite.results.writing import (  # noqa: F401
    RESERVE,
    RESERVE_BYTES,
    DiskFull,
    OutDirFull,
    append_atomic,
    full_message,
    is_disk_full,
    npy_bytes,
    plain_reason,
    release_room,
    reserve_room,
    strict_json,
    write_atomic,
    write_with_reserve,
)

CSV_COLUMNS = (
    "round",
    "accuracy",
    "loss",
    "train_loss",
    "objective_gap",
    "relative_error",
    "round_seconds",
    "elapsed_seconds",
    "client_compute_seconds",
    "client_compute_max_seconds",
    "cohort",
    "replies",
    "rejected",
    "failures",
    "bytes_down_per_client",
    "bytes_up_per_client",
    "vectors_down_per_client",
    "vectors_up_per_client",
    "lr",
    "val_loss",
    "val_accuracy",
    "fed_loss",
    "fed_accuracy",
    "fed_accuracy_worst10",
    "fed_val_loss",
    "fed_val_accuracy",
    "fed_clients",
    "fed_skipped",
    "fed_failures",
)
# accuracies summary.json reports final and best values of, when a run has them (central test = final_accuracy)
EXTRA_ACCURACIES = ("fed_accuracy", "fed_accuracy_worst10", "val_accuracy", "fed_val_accuracy")

log = logging.getLogger("flwr.fedsuite")


class RunRecorder:
    """Writes one run's folder while it runs: its config, a row per round, its summary, failed clients' reasons and,
    at the end, its plot and closing line."""

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
        (fedsuite.results.checkpoint); rows written after the checkpoint are dropped, as those rounds run again.
        `target_column`: the row column rounds-to-target reads (target-metric: accuracy, fed_accuracy, val_accuracy,
        fed_val_accuracy). `initial_model`: x⁰ (a flat NumPy array), written as model-round-0.npy for a check from
        outside the run."""
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
        return DiskFull(self.folder, name)

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
        if reason and " is full: " in plain_reason(self.folder, reason):
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
            head = f"=== round {server_round} │ {who} │ {reason}\n"
            append_atomic(self.folder / "clients.log", f"{head}{details.rstrip()}\n" if details else head)

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
            out["reason"] = plain_reason(self.folder, reason)
        text = strict_json(out, indent=2)
        with self._writing("summary.json"):
            if status == "running":
                write_atomic(self.folder / "summary.json", text)
            else:
                write_with_reserve(self.folder, self.folder / "summary.json", text)
        self.status = status

    def plot(self) -> None:
        draw_plot(self.folder, self.rows)


def _csv_row(row: dict[str, Any]) -> list:
    return ["" if row.get(c) is None else row.get(c) for c in CSV_COLUMNS]


def _csv_lines(rows) -> str:
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    for row in rows:
        writer.writerow(row)
    return out.getvalue()
