"""The compression study's runs (docs/compression-study/index.md), read and keyed for its report
(simulation/studies/compression.py): every results folder under <study>/<sweep>/runs/<algorithm>/<grid point>/seed-<s>/
becomes one record keyed by its run config (algorithm, compressor, compress-feedback, seed), with what the report
needs of a finished run: final accuracy, megabytes per client and round, the curve of accuracy against cumulative
uplink megabytes, and the round and megabytes at which each target was first reached.

The megabytes are those of one participating client, summed over the rows' `bytes_up_per_client` (and
`bytes_down_per_client` for up + down) of rounds 1 … r, r the first evaluated round whose test accuracy reaches the
target (the rows' accounting, as simulation/experiment/report.py counts it; 1 MB = 10⁶ bytes).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedsuite.results.run_folder import INITIAL_MODEL
from simulation.experiment import report
from simulation.experiment.report import FINISHED

TARGETS = (0.75, 0.8)
KINDS = ("none", "topk", "randk", "qsgd", "sign")  # compress-up, in the order the tables show them
FEEDBACK = ("none", "ef", "ef21")  # compress-feedback, likewise
ORDER = ("fedavg", "scaffold", "feddyn", "fedspeed", "fadamgt")  # algorithms first in this order, then by name


@dataclass(frozen=True)
class Setting:
    """A compressor as the run config names it: `compress-up` and its size, k (top-k, random-k) or the levels s
    (QSGD), 0 for the others."""

    kind: str
    size: int = 0
    down: str = "none"  # compress-down, and its k (compress-down-k): a compressed broadcast beside the uplink's
    down_size: int = 0

    @property
    def order(self) -> tuple[int, int, int]:
        """Uncompressed, then top-k and random-k by growing k, QSGD from the most levels down, sign; each with an
        uncompressed downlink first."""
        rank = KINDS.index(self.kind) if self.kind in KINDS else len(KINDS)
        return rank, -self.size if self.kind == "qsgd" else self.size, int(self.down != "none")

    def label(self, dim: int | None) -> str:
        """`uncompressed`, `top-k 1 %` (k as a share of the model's d, or `top-k k = 1992` without d), `QSGD 8-bit`
        (1 sign bit and ⌈log₂(s + 1)⌉ level bits per coordinate) or `sign`; with a compressed downlink, its own
        label after `, down: `."""
        up = Setting(self.kind, self.size)._label(dim)
        return up if self.down == "none" else f"{up}, down: {Setting(self.down, self.down_size)._label(dim)}"

    def _label(self, dim: int | None) -> str:
        if self.kind in ("topk", "randk"):
            name = "top-k" if self.kind == "topk" else "random-k"
            return f"{name} {100 * self.size / dim:.2g} %" if dim else f"{name} k = {self.size}"
        if self.kind == "qsgd":
            bits = 1 + self.size.bit_length()
            return f"QSGD {bits}-bit" if ((self.size + 1) & self.size) == 0 else f"QSGD s = {self.size}"
        return "uncompressed" if self.kind == "none" else self.kind


NONE = Setting("none")


def setting_of(config: dict) -> Setting:
    kind, down = str(config.get("compress-up", "none")), str(config.get("compress-down", "none"))
    down_size = int(config.get("compress-down-k", 0)) if down in ("topk", "randk") else 0
    if kind in ("topk", "randk"):
        return Setting(kind, int(config["compress-up-k"]), down, down_size)
    if kind == "qsgd":
        return Setting(kind, int(config.get("compress-up-levels", 15)), down, down_size)
    return Setting(kind, 0, down, down_size)


def dimension(folder: Path, config: dict | None = None) -> int | None:
    """d, the model's parameter count: from the run's model-round-0.npy (its header only), or, for a run whose
    broadcast travels dense (no compress-down), from its first row: 4 bytes a coordinate of each vector sent down.
    None when neither says it."""
    try:
        return int(np.prod(np.load(folder / INITIAL_MODEL, mmap_mode="r").shape))
    except (OSError, ValueError):
        pass
    if config is None or str(config.get("compress-down", "none")) != "none":
        return None
    try:
        row = next(r for r in report.read_rows(folder) if r["round"] > 0)
        vectors = row.get("vectors_down_per_client") or 0
        return int(round(row["bytes_down_per_client"] / (4 * vectors))) if vectors else None
    except (StopIteration, KeyError, TypeError, report.DamagedRun):
        return None


def measures(summary: dict, rows: list[dict], targets=TARGETS) -> dict:
    """A finished run in numbers: final accuracy, MB up and down per client and round (the mean over its trained
    rounds), its curve [(round, cumulative uplink MB, accuracy)] over the evaluated trained rounds and, per target,
    (round, uplink MB, up + down MB) up to the round it was first reached, or None."""
    trained = sorted((r for r in rows if r["round"] > 0), key=lambda r: r["round"])
    up = [(r.get("bytes_up_per_client") or 0) / 1e6 for r in trained]
    both = [u + (r.get("bytes_down_per_client") or 0) / 1e6 for u, r in zip(up, trained, strict=True)]
    sent_up, sent = list(itertools.accumulate(up)), list(itertools.accumulate(both))
    evaluated = [(i, r["round"], r["accuracy"]) for i, r in enumerate(trained) if r.get("accuracy") is not None]
    to = {}
    for t in targets:
        first = next((i for i, _, accuracy in evaluated if accuracy >= t), None)
        to[t] = None if first is None else (trained[first]["round"], sent_up[first], sent[first])
    rounds = max(len(trained), 1)
    return {
        "final_acc": summary.get("final_accuracy"),
        "no_better_than_initial": bool(summary.get("no_better_than_initial")),
        "up_mb_round": sum(up) / rounds,
        "down_mb_round": (sum(both) - sum(up)) / rounds,
        "curve": [(n, sent_up[i], accuracy) for i, n, accuracy in evaluated],
        "to": to,
    }


def read_run(folder: Path, targets=TARGETS) -> dict | None:
    """One run's record: algorithm, setting, feedback, seed, status, d, and measures() when it finished (a run whose
    files cannot be read whole is `damaged`: counted, never averaged). None, with a line on stderr, for a folder
    without a readable config.json (nothing says what it ran)."""
    config = report.read_run_config(folder)
    if config is None:
        return None
    record = {
        "algorithm": config["algorithm"],
        "setting": setting_of(config),
        "feedback": str(config.get("compress-feedback", "none")),
        "seed": int(config["seed"]),
        "status": report.run_status(folder),
        "dim": dimension(folder, config),
        "folder": folder,
    }
    if record["status"] in FINISHED:
        try:
            record |= measures(report.read_summary(folder), report.read_rows(folder), targets)
        except report.DamagedRun as err:
            print(f"counted as not completed: {err}", file=sys.stderr)
            record["status"] = "damaged"
    return record


def read_study(study: Path, targets=TARGETS) -> list[dict]:
    """Every run of the study: its sweeps' runs (<study>/<sweep>/runs/…), or a single sweep's (<study>/runs/…). Two
    folders with the same key (algorithm, setting, feedback, seed) are one run twice: the first in path order is
    kept and the other named on stderr."""
    folders = sorted({*study.glob("runs/*/*/seed-*"), *study.glob("*/runs/*/*/seed-*")})
    kept: dict[tuple, dict] = {}
    for folder in folders:
        record = read_run(folder, targets) if folder.is_dir() else None
        if record is None:
            continue
        key = (record["algorithm"], record["setting"], record["feedback"], record["seed"])
        if key in kept:
            print(f"skipped {folder}: the same run as {kept[key]['folder']}", file=sys.stderr)
            continue
        kept[key] = record
    return list(kept.values())


def grouped(records: list[dict]) -> dict[tuple[str, Setting, str], list[dict]]:
    """The records by (algorithm, setting, feedback), in the tables' order."""
    groups: dict[tuple[str, Setting, str], list[dict]] = {}
    for r in sorted(records, key=lambda r: (algorithm_order(r["algorithm"]), r["setting"].order,
                                              feedback_order(r["feedback"]), r["seed"])):  # fmt: skip
        groups.setdefault((r["algorithm"], r["setting"], r["feedback"]), []).append(r)
    return groups


def study_dimension(records: list[dict]) -> int | None:
    """The model's d, the same for every run of the study (one model); None when no run wrote its initial model."""
    return next((r["dim"] for r in records if r["dim"]), None)


def algorithm_order(algorithm: str) -> tuple[int, str]:
    return (ORDER.index(algorithm) if algorithm in ORDER else len(ORDER), algorithm)


def feedback_order(feedback: str) -> int:
    return FEEDBACK.index(feedback) if feedback in FEEDBACK else len(FEEDBACK)


def done(runs: list[dict]) -> list[dict]:
    """The runs that completed (or spent their budget as their config asked): the only ones averaged."""
    return [r for r in runs if r["status"] in FINISHED]
