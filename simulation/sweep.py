"""Algorithms × seeds × a small grid, in one results folder, with mean ± std over seeds.

    python -m simulation.sweep --algorithms fedavg,scaffold --seeds 0,1,2 --grid "lr=0.01,0.05" \\
        -c "num-server-rounds=150 partition-alpha=0.1" --out docs/sweep --engine inprocess --parallel 2

Every run goes to <out>/runs/<algorithm>/<grid point>/seed-<s>/ (a normal results folder). The sweep is resumable:
a run that completed with the same settings is reused, an unfinished one is redone. Runs go through the Ray
simulation (`--engine flwr`, as `simulation.run`) or the same strategy and clients in one process
(`--engine inprocess`); `--parallel K` runs K of them at once as separate processes (for spare cores or a GPU).
Then <out>/sweep.md and sweep.csv (per algorithm and grid point: final and best accuracy, rounds to each target,
s/round, communication per client per round, each as mean ± std over seeds) and <out>/sweep.png (accuracy vs round,
the mean with a min–max band over seeds) are written. Exit 1 if a run did not complete (the others still run).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedsuite.config import ALGORITHMS, ConfigError, resolve
from simulation import compare
from simulation.presets import expand as expand_preset
from simulation.run import Interrupted, RunFailed, parse_overrides, preflight, pyproject_defaults


@dataclass(frozen=True)
class Job:
    algorithm: str
    point: tuple[tuple[str, object], ...]  # the grid point's (key, value) pairs
    seed: int

    @property
    def tag(self) -> str:
        return "_".join(f"{k}={v}" for k, v in self.point) or "default"

    def folder(self, out: Path) -> Path:
        return out / "runs" / self.algorithm / self.tag / f"seed-{self.seed}"

    def overrides(self, shared: dict, out: Path) -> dict:
        folder = self.folder(out)
        return {**shared, **dict(self.point), "algorithm": self.algorithm, "seed": self.seed,
                "out-dir": str(folder.parent), "run-name": folder.name, "overwrite": True}  # fmt: skip


def parse_grid(text: str) -> list[tuple[tuple[str, object], ...]]:
    """`"lr=0.01,0.05 local-epochs=2,5"` → the cartesian product of (key, value) pairs (TOML values)."""
    axes = []
    for item in text.split():
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise ConfigError(f"--grid {item!r}: write key=value1,value2")
        axes.append([(key, parse_overrides([f"{key}={v}"])[key]) for v in values.split(",")])
    return [tuple(p) for p in itertools.product(*axes)] if axes else [()]


def run_one(overrides: dict, engine: str) -> Path:
    if engine == "inprocess":
        return compare.run_in_process(overrides)
    from simulation.run import run

    return run(overrides, quiet=True, check_data=False)


def execute(jobs: list[Job], shared: dict, out: Path, engine: str, parallel: int) -> dict[Job, str]:
    """Run the jobs (K at once as child processes when parallel > 1); returns each job's status."""
    status: dict[Job, str] = {}
    if parallel <= 1:
        for job in jobs:
            print(f"── {job.algorithm} {job.tag} seed {job.seed} ──", flush=True)
            try:
                run_one(job.overrides(shared, out), engine)
                status[job] = "completed"
            except RunFailed as err:
                status[job] = err.status
                print(f"   {err.status}: {err}", flush=True)
        return status
    pending, running = list(jobs), {}
    while pending or running:
        while pending and len(running) < parallel:
            job = pending.pop(0)
            command = [sys.executable, "-m", "simulation.sweep", "--run-one", json.dumps(job.overrides(shared, out)),
                       "--engine", engine]  # fmt: skip
            print(f"── start {job.algorithm} {job.tag} seed {job.seed} ──", flush=True)
            running[job] = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        for job, proc in list(running.items()):
            if proc.poll() is not None:
                del running[job]
                status[job] = _summary_status(job.folder(out)) if proc.returncode in (0, 1, 3) else "failed"
                print(f"── done {job.algorithm} {job.tag} seed {job.seed}: {status[job]} ──", flush=True)
        time.sleep(0.5)
    return status


def _summary_status(folder: Path) -> str:
    try:
        return json.loads((folder / "summary.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return "failed"


def mean_std(values: list[float]) -> tuple[float, float] | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return mean, math.sqrt(var)


def aggregate(jobs: list[Job], out: Path, targets: list[float]) -> list[dict]:
    """One row per (algorithm, grid point): mean ± std over the seeds whose run completed."""
    groups: dict[tuple, list[dict]] = {}
    for job in jobs:
        if _summary_status(job.folder(out)) == "completed":
            summary = compare.summarize(job.algorithm, job.folder(out), targets)
            groups.setdefault((job.algorithm, job.tag), []).append(summary)
        else:
            groups.setdefault((job.algorithm, job.tag), [])
    rows = []
    for (algorithm, tag), runs in groups.items():
        seeds = sum(1 for j in jobs if (j.algorithm, j.tag) == (algorithm, tag))
        row = {"algorithm": algorithm, "grid": tag, "seeds": f"{len(runs)}/{seeds}"}
        for key in ("final_acc", "best_acc", "s_per_round", "mb_per_client_round"):
            row[key] = mean_std([r[key] for r in runs if r.get(key) is not None])
        for t in targets:
            reached = [r["rounds_to"][f"{t:g}"] for r in runs if r["rounds_to"].get(f"{t:g}") is not None]
            row[f"rounds_to_{t:g}"] = (mean_std(reached), len(reached), len(runs))
        row["curves"] = [r["curve"] for r in runs]
        rows.append(row)
    return rows


def format_mean_std(value: tuple[float, float] | None, spec: str) -> str:
    return "–" if value is None else f"{value[0]:{spec}} ± {value[1]:{spec}}"


def markdown(rows: list[dict], targets: list[float], command: str) -> str:
    head = ["algorithm", "grid", "seeds", "final acc", "best acc", *(f"rounds to {t:g}" for t in targets),
            "s/round", "MB/client/round"]  # fmt: skip
    lines = [f"Reproduce: `{command}`", "", "Mean ± std over seeds (sample std); rounds to a target over the seeds "
             "that reached it (k/n).", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    for r in rows:
        cells = [
            r["algorithm"],
            r["grid"],
            r["seeds"],
            *(format_mean_std(r[k], ".4f") for k in ("final_acc", "best_acc")),
        ]
        for t in targets:
            stats, k, n = r[f"rounds_to_{t:g}"]
            cells.append("–" if stats is None else f"{format_mean_std(stats, '.1f')} ({k}/{n})")
        cells += [format_mean_std(r["s_per_round"], ".2f"), format_mean_std(r["mb_per_client_round"], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        curves = [dict(c) for c in r["curves"] if c]
        if not curves:
            continue
        rounds = sorted(set.intersection(*(set(c) for c in curves)))
        values = [[c[t] for c in curves] for t in rounds]
        label = r["algorithm"] + ("" if r["grid"] == "default" else f" {r['grid']}") + f" ({len(curves)} seeds)"
        line = ax.plot(rounds, [sum(v) / len(v) for v in values], label=label)[0]
        ax.fill_between(rounds, [min(v) for v in values], [max(v) for v in values], color=line.get_color(), alpha=0.2)
    ax.set(xlabel="round", ylabel="test accuracy", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", help=f"comma-separated, from: {', '.join(ALGORITHMS)}")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds")
    parser.add_argument("--grid", default="", help='e.g. "lr=0.01,0.05 local-epochs=2,5" (cartesian product)')
    parser.add_argument("-c", "--run-config", action="append", default=[], help="shared key=value overrides")
    parser.add_argument("--out", default="results/sweep")
    parser.add_argument("--engine", choices=("flwr", "inprocess"), default="flwr")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (separate processes)")
    parser.add_argument("--title", default="")
    parser.add_argument("--run-one", help=argparse.SUPPRESS)  # a child of --parallel: one run's overrides as JSON
    args = parser.parse_args(argv)
    if args.run_one:
        try:
            run_one(json.loads(args.run_one), args.engine)
            return 0
        except RunFailed as err:
            return err.exit_code
    out = Path(args.out).resolve()
    try:
        if not args.algorithms:
            raise ConfigError("--algorithms: give at least one")
        algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
        seeds = [int(s) for s in args.seeds.split(",")]
        shared = parse_overrides(args.run_config)
        points = parse_grid(args.grid)
        for algorithm, point in itertools.product(algorithms, points):  # every setting checked before any run
            resolve({**pyproject_defaults(), **expand_preset({**shared, **dict(point), "algorithm": algorithm})[0]})
        cfg = resolve({**pyproject_defaults(), **expand_preset(shared)[0]})
        preflight(cfg)
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    jobs = [Job(a, p, s) for a, p, s in itertools.product(algorithms, points, seeds)]
    todo = [j for j in jobs if not compare.finished(j.folder(out), expand_preset(
        {**shared, **dict(j.point), "seed": j.seed, "algorithm": j.algorithm})[0])]  # fmt: skip
    print(f"sweep: {len(jobs)} runs, {len(jobs) - len(todo)} finished earlier and reused", flush=True)
    try:
        status = execute(todo, shared, out, args.engine, args.parallel)
    except Interrupted as err:
        print(f"interrupted ({err}); finished runs are kept, rerun the same command to continue", file=sys.stderr)
        return err.exit_code
    rows = aggregate(jobs, out, cfg.targets)
    command = (f"python -m simulation.sweep --algorithms {','.join(algorithms)} --seeds {args.seeds}"
               + (f' --grid "{args.grid}"' if args.grid else "") + "".join(f' -c "{c}"' for c in args.run_config)
               + f" --engine {args.engine} --out {args.out}")  # fmt: skip
    (out / "sweep.md").write_text(markdown(rows, cfg.targets, command))
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["algorithm", "grid", "seeds", "final_acc_mean", "final_acc_std", "best_acc_mean",
                         "best_acc_std", "s_per_round_mean", "mb_per_client_round_mean",
                         *(f"rounds_to_{t:g}_mean" for t in cfg.targets)])  # fmt: skip
        for r in rows:
            first = lambda v: None if v is None else v[0]  # noqa: E731
            writer.writerow([r["algorithm"], r["grid"], r["seeds"], first(r["final_acc"]),
                             r["final_acc"][1] if r["final_acc"] else None, first(r["best_acc"]),
                             r["best_acc"][1] if r["best_acc"] else None, first(r["s_per_round"]),
                             first(r["mb_per_client_round"]),
                             *(first(r[f"rounds_to_{t:g}"][0]) for t in cfg.targets)])  # fmt: skip
    plot(rows, out / "sweep.png", args.title or f"{cfg['dataset']}, {cfg['num-clients']} clients")
    print((out / "sweep.md").read_text())
    return 1 if any(s != "completed" for s in status.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
