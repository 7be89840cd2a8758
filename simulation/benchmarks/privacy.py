"""What each privacy option costs: the steady seconds per round of the same run with and without it, as a ratio.

    python -m simulation.benchmarks.privacy                 # Fashion-MNIST 2NN, 10 clients a round, 6 rounds
    python -m simulation.benchmarks.privacy --model logreg  # a smaller model

Every run is the in-process engine (the same strategy and client code, no Ray), one after the other in this process,
on the same data, cohorts and minibatches: plain; client-level DP with the noise added by the server (dp='server');
with the noise shared out among the clients (dp='clients'); with adaptive clipping; DP-SGD (per-record gradients,
dp-sgd=true). Round 1 (first data loads) and the last round (test evaluation) are left out: "steady" is the median
of the other rounds' `round_seconds` (fedsuite.results.folder.steady_seconds). The last lines, `<option>_ratio x`, are
the option's steady round over the plain run's: 1.00 = free. Run it on a quiet machine; the ratios are one run each.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fedsuite.server.app import quiet_flower_logs
from simulation.benchmarks.option_runs import base, option_arguments, timed_run

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
    },
    "dp_sgd": {"dp-sgd": True, "dp-sgd-noise": 1.0, "dp-sgd-clip": 1.0},
}


def main(argv: list[str] | None = None) -> int:
    args, options = option_arguments("python -m simulation.benchmarks.privacy", __doc__.split("\n\n")[0], OPTIONS, argv)
    quiet_flower_logs()
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="fedsuite-privacy-bench-") as tmp:
        for name in options:
            seconds[name], _ = timed_run({**base(args.model, args.rounds), **OPTIONS[name]}, Path(tmp), name)
            print(f"{name}: steady round {seconds[name]:.3f} s")
    for name in options[1:]:
        print(f"{name}_ratio {seconds[name] / seconds['plain']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
