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
free), `systems_ratio` last (all models on); a run whose final model differs from the plain run's ends it with exit
code 1 and no ratio. Run it on a quiet machine; the ratios are one run each.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from fedsuite.server.app import quiet_flower_logs
from simulation.benchmarks.option_runs import STEPS, base, option_arguments, timed_run

WORK = {"local-work": "uniform", "local-steps-min": STEPS}
DEADLINE = {"client-speed": "uniform", "speed-spread": 1.0, "round-deadline": STEPS}
AVAILABILITY = {"availability": "cycle", "availability-period": 1, "availability-fraction": 1.0}
OPTIONS = {"plain": {}, "work": WORK, "deadline": DEADLINE, "availability": AVAILABILITY,
           "systems": {**WORK, **DEADLINE, **AVAILABILITY}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args, options = option_arguments("python -m simulation.benchmarks.systems", __doc__.split("\n\n")[0], OPTIONS, argv)
    quiet_flower_logs()
    seconds, models = {}, {}
    with tempfile.TemporaryDirectory(prefix="fedsuite-systems-bench-") as tmp:
        for name in options:
            seconds[name], strategy = timed_run({**base(args.model, args.rounds), **OPTIONS[name]}, Path(tmp), name)
            models[name] = strategy.x.tobytes()
            same = "" if name == "plain" else f", same_model {'yes' if models[name] == models['plain'] else 'no'}"
            print(f"{name}: steady round {seconds[name]:.3f} s{same}")
    differ = [name for name in options if models[name] != models["plain"]]
    if differ:  # the premise failed: the ratios would compare different work
        print(f"{', '.join(differ)}: the final model differs from the plain run's, so the runs did different work "
              "and no ratio measures the models' cost", file=sys.stderr)  # fmt: skip
        return 1
    for name in options[1:]:
        print(f"{name}_ratio {seconds[name] / seconds['plain']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
