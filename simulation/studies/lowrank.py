"""The LoSAC paper's low-rank matrix estimation study (§V-E; docs/lowrank/index.md): LoSAC-Prox vs SCAFFOLD-Prox with
the nuclear-norm prox on X ∈ R^{64×64}, ground truth X_G = diag(I_r, 0), r ∈ {32, 16, 8, 4, 2}.

    python -m simulation.studies.lowrank --out docs/lowrank                       # the paper's settings (long on CPU)
    python -m simulation.studies.lowrank --out /tmp/lr --ranks 4 --rounds 20 --lambdas 0.1

Every (algorithm, r, λ) is one run of the real strategy and clients in one process (`fedsuite.run.inprocess`), same
data, blocks and cohorts for both algorithms. After every round it records ‖X − X_G‖_F and the numerical rank
(singular values > 1e-3). Writes <out>/rows.csv (every round of every run), <out>/lowrank.md and lowrank.csv (per
algorithm, r and λ: final error and rank, whether the rank is exact, and which λ has the lowest error), and
<out>/lowrank.png (error and rank vs round for the lowest-error λ).
"""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial
from pathlib import Path

import numpy as np

from fedsuite.config.run_config import ConfigError, resolve
from simulation.experiment import report
from simulation.experiment.flags import Repeatable, parse_list
from simulation.experiment.jobs import Job, Outcome, validate
from simulation.experiment.progress import print_written
from simulation.experiment.runner import run_jobs
from simulation.launcher.overrides import parse_overrides

# The paper's setting: N = 100, S = 10, M = 5, T = 5, 100 samples per client (blocks of 20), mean-reduced
# block loss; η = 2e-3 (halve it if it diverges), every step on one block, nuclear prox after each step.
BASE = {
    "dataset": "synthetic-lowrank",
    "num-clients": 100,
    "clients-per-round": 10,
    "synthetic-samples": 100,
    "synthetic-noise": 0.1,
    "lowrank-size": 64,
    "losac-blocks": 5,
    "local-steps": 5,
    "local-batches": "blocks",
    "loss-reduction": "mean",
    "lr": 0.002,
    "prox-penalty": "nuclear",
    "eval-every": 100000,
    "min-replies": 1.0,
}
FIELDS = ("algorithm", "rank", "lambda", "round", "frobenius_error", "estimated_rank")


def run_one(algorithm: str, rank: int, lam: float, rounds: int, extra: dict) -> list[dict]:
    from fedsuite.local.variance import numerical_rank
    from fedsuite.run.inprocess import run_inprocess
    from fedsuite.server.observers import RoundObserver

    cfg = {**BASE, **extra, "algorithm": algorithm, "lowrank-rank": rank, "prox-lambda": lam,
           "num-server-rounds": rounds}  # fmt: skip
    size = int(resolve(cfg)["lowrank-size"])
    truth = np.zeros((size, size))
    truth[np.arange(rank), np.arange(rank)] = 1.0
    rows: list[dict] = []

    class Recovery(RoundObserver):
        """After every round: the distance to the ground truth and the numerical rank of the global model."""

        def aggregated(self, server_round, strategy, x_before, replies):
            x = np.asarray(strategy.x, np.float64).reshape(size, size)
            error = float(np.linalg.norm(x - truth))
            rows.append({"algorithm": algorithm, "rank": rank, "lambda": lam, "round": server_round,
                         "frobenius_error": error, "estimated_rank": numerical_rank(x)})  # fmt: skip

    run_inprocess(cfg, observers=[Recovery()])
    return rows


def final_rows(rows: list[dict]) -> list[dict]:
    """The last round of every (algorithm, r, λ), marking per (algorithm, r) the λ with the lowest final error."""
    finals: dict[tuple, dict] = {}
    for row in rows:
        key = (row["algorithm"], row["rank"], row["lambda"])
        if key not in finals or row["round"] > finals[key]["round"]:
            finals[key] = row
    best: dict[tuple, float] = {}
    for (algorithm, rank, _), row in finals.items():
        best[(algorithm, rank)] = min(best.get((algorithm, rank), np.inf), row["frobenius_error"])
    return [
        {**row, "rank_exact": row["estimated_rank"] == row["rank"],
         "best_lambda": row["frobenius_error"] == best[(row["algorithm"], row["rank"])]}
        for row in sorted(finals.values(), key=lambda r: (-r["rank"], r["lambda"], r["algorithm"]))
    ]  # fmt: skip


def jobs_for(algorithms: list[str], ranks: list[int], lambdas: list[float], rounds: int, extra: dict) -> list[Job]:
    """Every (r, λ, algorithm): one in-process run that records its own rows (run_one)."""
    return [
        Job({**BASE, **extra, "algorithm": a, "lowrank-rank": r, "prox-lambda": lam, "num-server-rounds": rounds},
            label=f"{a} r={r} λ={lam:g}", keys={"algorithm": a, "rank": r, "lambda": lam},
            work=partial(run_one, a, r, lam, rounds, extra))
        for r in ranks for lam in lambdas for a in algorithms
    ]  # fmt: skip


def print_last(outcome: Outcome) -> None:
    if outcome.completed and outcome.value:
        last, keys = outcome.value[-1], outcome.job.keys
        print(f"{keys['algorithm']:14s} r={keys['rank']:<3d} λ={keys['lambda']:<6g} round {last['round']}: "
              f"‖X − X_G‖_F = {last['frobenius_error']:.4f}, rank {last['estimated_rank']}", flush=True)  # fmt: skip


def write(out: Path, rows: list[dict], lr: float, lambdas: list[float]) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    report.write_csv(out / "rows.csv", rows, FIELDS)
    table = final_rows(rows)
    report.write_csv(out / "lowrank.csv", table, (*FIELDS, "rank_exact", "best_lambda"))
    head = ["true rank r", "λ", "algorithm", "rounds", "final ‖X − X_G‖_F", "estimated rank", "exact rank"]
    cells = [[str(row["rank"]), f"{row['lambda']:g}{'*' if row['best_lambda'] else ''}", row["algorithm"],
              str(row["round"]), f"{row['frobenius_error']:.4f}", str(row["estimated_rank"]),
              "yes" if row["rank_exact"] else "no"] for row in table]  # fmt: skip
    lines = [
        f"Low-rank matrix estimation (LoSAC paper §V-E): η = {lr:g}, λ ∈ "
        f"{{{', '.join(f'{x:g}' for x in lambdas)}}}; * = the λ with the lowest final ‖X − X_G‖_F for that row's "
        "algorithm and r; rank = singular values > 1e-3.",
        "",
        *report.markdown_table(head, cells),
    ]
    (out / "lowrank.md").write_text("\n".join(lines) + "\n")
    plot(out / "lowrank.png", rows, table)
    return table


def plot(path: Path, rows: list[dict], table: list[dict]) -> None:
    """Error and recovered rank per round, the lowest-error λ of every (algorithm, r): colour = r, dash = algorithm."""
    ranks = sorted({row["rank"] for row in table}, reverse=True)
    error, rank = [], []
    for best in (row for row in table if row["best_lambda"]):
        run = [r for r in rows if (r["algorithm"], r["rank"], r["lambda"]) ==
               (best["algorithm"], best["rank"], best["lambda"])]  # fmt: skip
        style = "-" if best["algorithm"] == "losac-prox" else "--"
        label = f"{best['algorithm']} r={best['rank']} λ={best['lambda']:g}"
        colour = ranks.index(best["rank"])
        error.append(report.Line(label, [[(r["round"], r["frobenius_error"]) for r in run]], style, colour))
        rank.append(report.Line(label, [[(r["round"], r["estimated_rank"]) for r in run]], style, colour))
    report.plot(path, [
        report.Panel(error, ylabel="‖X − X_G‖_F", yscale="log", title="estimation error", legend_size=None,
                     grid=False),
        report.Panel(rank, ylabel="rank (σ > 1e-3)", yscale="log", title="recovered rank", legend_size=6, grid=False),
    ], figsize=(12, 4.5))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--algorithms", action=Repeatable, default="losac-prox,scaffold-prox")
    parser.add_argument("--ranks", action=Repeatable, default="32,16,8,4,2")
    parser.add_argument("--lambdas", action=Repeatable, default="0.001,0.01,0.1")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("-c", "--run-config", action="append", default=[], help="run-config overrides")
    args = parser.parse_args(argv)
    try:
        extra = parse_overrides(args.run_config)
        algorithms = parse_list(args.algorithms, "--algorithms")  # each once (ConfigError naming a duplicate)
        ranks = parse_list(args.ranks, "--ranks", int)
        lambdas = parse_list(args.lambdas, "--lambdas", float)
        jobs = jobs_for(algorithms, ranks, lambdas, args.rounds, extra)
        validate(jobs)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    logging.getLogger("flwr").setLevel(logging.WARNING)
    outcomes = run_jobs(jobs, on_done=print_last)
    rows = [row for outcome in outcomes if outcome.completed for row in outcome.value]
    table = write(args.out, rows, float({**BASE, **extra}["lr"]), lambdas)
    print((args.out / "lowrank.md").read_text())
    print_written([args.out / name for name in ("lowrank.md", "lowrank.csv", "lowrank.png", "rows.csv")])
    return 0 if table and all(o.completed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
