"""What each privacy option costs: the steady seconds per round of the same run with and without it, as a ratio.

    python -m simulation.benchmarks.privacy                 # Fashion-MNIST 2NN, 10 clients a round, 6 rounds
    python -m simulation.benchmarks.privacy --model logreg  # a smaller model

Every run is the in-process engine (the same strategy and client code, no Ray), one after the other in this process,
on the same data, cohorts and minibatches: plain; client-level DP with the noise added by the server (dp='server');
with the noise shared out among the clients (dp='clients'); with adaptive clipping; DP-SGD (per-record gradients,
dp-sgd=true). Round 1 (first data loads) and the last round (test evaluation) are left out: "steady" is the median
of the other rounds' `round_seconds` (fedsuite.results.steady_seconds). The last lines, `<option>_ratio x`, are the
option's steady round over the plain run's: 1.00 = free. Run it on a quiet machine; the ratios are one run each.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from fedsuite.inprocess import run_inprocess
from fedsuite.results import steady_seconds
from fedsuite.server_app import quiet_flower_logs

OPTIONS = {
    "plain": {},
    "dp_server": {"dp": "server", "dp-noise": 1.0, "dp-clip": 1.0},
    "dp_clients": {"dp": "clients", "dp-noise": 1.0, "dp-clip": 1.0},
    "dp_adaptive": {
        "dp": "server",
        "dp-noise": 1.0,
        "dp-clip": 1.0,
        "dp-clip-mode": "adaptive",
        "dp-count-noise": 1.0,
    },  # fmt: skip
    "dp_sgd": {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 1.0},
}


def base(model: str, rounds: int) -> dict:
    return {
        "dataset": "fashion-mnist", "model": model, "partition": "dirichlet", "partition-alpha": 0.1,
        "num-clients": 100, "clients-per-round": 10, "local-steps": 24, "batch-size": 50, "lr": 0.05,
        "num-server-rounds": rounds, "eval-every": rounds, "algorithm": "fedavg", "seed": 0,
    }  # fmt: skip


def steady(run_config: dict, out: Path, name: str) -> float:
    run_inprocess({**run_config, "out-dir": str(out), "run-name": name}, record=True)
    rows = [json.loads(line) for line in (out / name / "rounds.jsonl").read_text().splitlines()]
    return steady_seconds([r for r in rows if r["round"] > 0], skip_last=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.benchmarks.privacy",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--model", default="2nn", help="a built-in Fashion-MNIST model: 2nn, logreg, cnn")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (at least 4)")
    parser.add_argument("--options", default=",".join(OPTIONS), help=f"comma-separated, of {', '.join(OPTIONS)}")
    args = parser.parse_args(argv)
    options = [o.strip() for o in args.options.split(",") if o.strip()]
    unknown = [o for o in options if o not in OPTIONS]
    if unknown or args.rounds < 4:
        parser.error(f"--options: unknown {', '.join(unknown)}" if unknown else "--rounds: at least 4")
    if "plain" not in options:
        options.insert(0, "plain")
    quiet_flower_logs()
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="fedsuite-privacy-bench-") as tmp:
        for name in options:
            seconds[name] = steady({**base(args.model, args.rounds), **OPTIONS[name]}, Path(tmp), name)
            print(f"{name}: steady round {seconds[name]:.3f} s")
    for name in options[1:]:
        print(f"{name}_ratio {seconds[name] / seconds['plain']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
