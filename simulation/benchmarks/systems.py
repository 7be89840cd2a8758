"""What the system models cost: the steady seconds per round of the same work with the models of
docs/running/systems.md on and off, as a ratio.

    python -m simulation.benchmarks.systems                 # Fashion-MNIST 2NN, 10 clients a round, 6 rounds
    python -m simulation.benchmarks.systems --model logreg  # a smaller model, where the server's share is larger

Each option turns a model on in a setting where it changes nothing of the work, so the ratio is the cost of deciding,
sending and recording it, not of different training: unequal work drawn on the range [K, K]; every client at speed 1
under a deadline of K steps; cyclic availability with every client always available; and all of them together. Each
run's final model is compared with the plain run's (`same_model`): equal bytes show the runs did the same work. Every
run is the in-process engine, one after the other in this process, on the same data, cohorts and minibatches. Round 1
(first data loads) and the last round (test evaluation) are left out: "steady" is the median of the other rounds'
`round_seconds`. The last lines, `<option>_ratio x`, are each option's steady round over the plain run's (1.00 =
free), `systems_ratio` last (all models on). Run it on a quiet machine; the ratios are one run each.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from fedsuite.inprocess import run_inprocess
from fedsuite.results import steady_seconds
from fedsuite.server_app import quiet_flower_logs

STEPS = 24
WORK = {"local-work": "uniform", "local-steps-min": STEPS}
DEADLINE = {"client-speed": "uniform", "speed-spread": 1.0, "round-deadline": STEPS}
AVAILABILITY = {"availability": "cycle", "availability-period": 1, "availability-fraction": 1.0}
OPTIONS = {"plain": {}, "work": WORK, "deadline": DEADLINE, "availability": AVAILABILITY,
           "systems": {**WORK, **DEADLINE, **AVAILABILITY}}  # fmt: skip


def base(model: str, rounds: int) -> dict:
    return {
        "dataset": "fashion-mnist", "model": model, "partition": "dirichlet", "partition-alpha": 0.1,
        "num-clients": 100, "clients-per-round": 10, "local-steps": STEPS, "batch-size": 50, "lr": 0.05,
        "num-server-rounds": rounds, "eval-every": rounds, "algorithm": "fedavg", "seed": 0,
    }  # fmt: skip


def measure(run_config: dict, out: Path, name: str) -> tuple[float, bytes]:
    """The run's steady seconds per round and its final model's bytes."""
    strategy = run_inprocess({**run_config, "out-dir": str(out), "run-name": name}, record=True)
    rows = [json.loads(line) for line in (out / name / "rounds.jsonl").read_text().splitlines()]
    return steady_seconds([r for r in rows if r["round"] > 0], skip_last=True), strategy.x.tobytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.benchmarks.systems",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--model", default="2nn", help="a built-in Fashion-MNIST model: 2nn, logreg, cnn")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (at least 4)")
    parser.add_argument("--options", default=",".join(OPTIONS), help=f"comma-separated, of {', '.join(OPTIONS)}")
    args = parser.parse_args(argv)
    options = [o.strip() for o in args.options.split(",") if o.strip()]
    unknown = [o for o in options if o not in OPTIONS]
    if unknown or args.rounds < 4:
        parser.error(f"--options: unknown {', '.join(unknown)}" if unknown else "--rounds: at least 4")
    options = ["plain"] + [o for o in options if o != "plain"]
    quiet_flower_logs()
    seconds, models = {}, {}
    with tempfile.TemporaryDirectory(prefix="fedsuite-systems-bench-") as tmp:
        for name in options:
            seconds[name], models[name] = measure({**base(args.model, args.rounds), **OPTIONS[name]}, Path(tmp), name)
            same = "" if name == "plain" else f", same_model {'yes' if models[name] == models['plain'] else 'no'}"
            print(f"{name}: steady round {seconds[name]:.3f} s{same}")
    for name in options[1:]:
        print(f"{name}_ratio {seconds[name] / seconds['plain']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
