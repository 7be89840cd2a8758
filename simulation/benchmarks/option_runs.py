"""What the option-cost benchmarks share (simulation.benchmarks.privacy, simulation.benchmarks.systems): the plain
run every option is compared with, their flags, and one timed in-process run.

Each run is the in-process engine on the same data, cohorts and minibatches; "steady" is the median of the rounds'
`round_seconds` without round 1 (first data loads) and the last round (test evaluation)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedsuite.results.folder import steady_seconds
from fedsuite.run.inprocess import run_inprocess

STEPS = 24  # local steps per client and round in the plain run


def base(model: str, rounds: int) -> dict:
    """The plain run: FedAvg on Fashion-MNIST, Dirichlet 0.1 over 100 clients, 10 a round, 24 steps of batch 50."""
    return {
        "dataset": "fashion-mnist", "model": model, "partition": "dirichlet", "partition-alpha": 0.1,
        "num-clients": 100, "clients-per-round": 10, "local-steps": STEPS, "batch-size": 50, "lr": 0.05,
        "num-server-rounds": rounds, "eval-every": rounds, "algorithm": "fedavg", "seed": 0,
    }  # fmt: skip


def option_arguments(prog: str, description: str, options: dict, argv: list[str] | None):
    """(args, the options to run, plain first): --model, --rounds (at least 4), --options, checked."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", default="2nn", help="a built-in Fashion-MNIST model: 2nn, logreg, cnn")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (at least 4)")
    parser.add_argument("--options", default=",".join(options), help=f"comma-separated, of {', '.join(options)}")
    args = parser.parse_args(argv)
    chosen = [o.strip() for o in args.options.split(",") if o.strip()]
    unknown = [o for o in chosen if o not in options]
    if unknown or args.rounds < 4:
        parser.error(f"--options: unknown {', '.join(unknown)}" if unknown else "--rounds: at least 4")
    return args, ["plain"] + [o for o in chosen if o != "plain"]


def timed_run(run_config: dict, out: Path, name: str):
    """(steady seconds per round, the strategy) of one recorded in-process run."""
    strategy = run_inprocess({**run_config, "out-dir": str(out), "run-name": name}, record=True)
    rows = [json.loads(line) for line in (out / name / "rounds.jsonl").read_text().splitlines()]
    return steady_seconds([r for r in rows if r["round"] > 0], skip_last=True), strategy
