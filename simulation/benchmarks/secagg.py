"""Time per round with secure aggregation (SecAgg+, docs/privacy-secagg.md) against the plain run.

    python -m simulation.benchmarks.secagg                    # cohorts of 3, 5 and 10, 6 rounds each, both ways
    python -m simulation.benchmarks.secagg --cohorts 3,5 --rounds 4

For every cohort size S, two real `flwr run` Ray simulations of FedAvg on the synthetic least-squares federation
with S clients, all S of them in every round, one SuperNode each (client-mapping='fixed'): one plain, one with
secagg=true. The steady round time is fedsuite.results.folder.steady_seconds (the median over rounds 2..R-1: round 1 is
the cold start, the last round evaluates). The last line, `secagg_ratio x`, is the largest ratio of secure to
plain steady round time over the cohort sizes. A JSON file with every number is written to the output folder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from fedsuite.results.folder import steady_seconds
from simulation.launcher.launch import run
from simulation.launcher.project import PROJECT

FEDERATION = {"dataset": "synthetic-lsq", "algorithm": "fedavg", "client-mapping": "fixed", "local-steps": 20,
              "batch-size": 10, "lr": 0.02}  # fmt: skip


def steady_round(overrides: dict, out_dir: Path, name: str) -> tuple[float, float]:
    """(steady seconds per round, wall seconds of the launch) of one `flwr run`."""
    start = time.perf_counter()
    # the benchmark's own runs: a second invocation with the same --out-dir replaces them
    folder = run({**overrides, "out-dir": str(out_dir), "run-name": name, "overwrite": True}, quiet=True)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return float(steady_seconds(rows, skip_last=True)), wall


def measure(cohort: int, rounds: int, out_dir: Path) -> dict:
    cfg = {**FEDERATION, "num-clients": cohort, "clients-per-round": cohort, "num-server-rounds": rounds}
    plain, plain_wall = steady_round(cfg, out_dir, f"plain-{cohort}")
    secure, secure_wall = steady_round({**cfg, "secagg": True}, out_dir, f"secagg-{cohort}")
    return {"cohort": cohort, "plain_steady_round_s": plain, "secagg_steady_round_s": secure,
            "secagg_ratio": secure / plain, "plain_wall_s": plain_wall, "secagg_wall_s": secure_wall}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    summary = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m simulation.benchmarks.secagg", description=summary)
    parser.add_argument("--cohorts", default="3,5,10", help="cohort sizes S (comma-separated)")
    parser.add_argument("--rounds", type=int, default=6, help="R, rounds per run (at least 3)")
    parser.add_argument("--out-dir", default=None, help="results folder (default results/benchmark/secagg-<time>)")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be >= 3 (steady rounds are 2..R-1)")
    out_dir = Path(args.out_dir or PROJECT / "results" / "benchmark" / time.strftime("secagg-%Y%m%d-%H%M%S"))
    out_dir = out_dir.resolve()
    reports = [measure(int(s), args.rounds, out_dir) for s in args.cohorts.split(",") if s.strip()]
    (out_dir / "benchmark.json").write_text(json.dumps(reports, indent=2))
    print(f"\nresults: {out_dir / 'benchmark.json'}")
    print(f"\n{'S':>4} {'plain steady s':>15} {'secagg steady s':>16} {'ratio':>7}")
    for r in reports:
        print(f"{r['cohort']:>4} {r['plain_steady_round_s']:>15.3f} {r['secagg_steady_round_s']:>16.3f} "
              f"{r['secagg_ratio']:>7.2f}")  # fmt: skip
    print(f"secagg_ratio {max(r['secagg_ratio'] for r in reports):.3f}")


if __name__ == "__main__":
    main()
