"""Where a round of the reference workload goes: each phase's seconds, round by round, through the suite.

    python -m simulation.benchmarks.round_phases                          # batched FedAvg, ResNet-18-GN, on CUDA
    python -m simulation.benchmarks.round_phases --algorithm fedspeed --one-at-a-time
    python -m simulation.benchmarks.round_phases --model cnn --clients 2 --steps 2 --rounds 2 --device cpu   # a check

The run is `simulation.benchmarks.gpu_round`'s suite path (the same workload flags, the same fake CIFAR-10 files
unless --data-dir names a folder holding cifar-10-batches-py/), batched unless --one-at-a-time. Timers wrap the
suite's own functions for the length of the run, so every phase is the wall time of its calls in that round, on the
calling thread:

| phase | what it times |
|---|---|
| `configure_fit` | the strategy's instructions for the round |
| `train` | a client's local loop, one client at a time (one at a time, or a batched run's fallback) |
| `prepare` | each batched client built and given its downlink (on the device) |
| `train_stacked` | the batched groups' training, until its losses are on the host |
| `eager_step0`, `record_step1` | inside it, on CUDA: step 1 run as usual, the recording of step 2 (synchronised) |
| `finish` | each client's uplink, state save and reply arrays |
| `to_host` | inside it, the uplinks brought back from the device |
| `aggregate_fit` | the server's checks, aggregation and the round's figures |
| `consistency` | inside it, the local-consistency figure |

Where some clients of a batched run trained one at a time, or a group's steps were not recorded, a line after the
first says why (as gpu_round's rows do). Then `training_s <s>  round_s <s>  round_over_training <x>`: the training
phase (`train_stacked`, plus `train`, a client trained one at a time) and the round, each the median of rounds
2..R, and their ratio: what the round costs beyond the card's training. The last line is `steady_s <s>`: the median
of rounds 2..R, as gpu_round measures a round.

--algorithms a,b,c runs several algorithms one after the other in the same process (the same data), each block as
above, then one summary line per algorithm and last `round_over_training_max <x>`, the worst of them. The stateful
methods, whose client state is read and written every round:

    python -m simulation.benchmarks.round_phases --rounds 4 --algorithms scaffold,feddyn,fedspeed,fedsmoo,fadamgt,losac
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

from fedsuite.batched import dispatch, graph
from fedsuite.config.run_config import resolve
from fedsuite.config.schema import ConfigError
from fedsuite.node import client as client_adapter
from fedsuite.server import accounting, adapter
from fedsuite.state.host_memory import reuse_host_memory
from simulation.benchmarks.fake_cifar import write_fake_cifar10
from simulation.benchmarks.gpu_round import (
    BATCHED,
    one_line,
    reference_config,
    shown,
    suite_path,
    workload_arguments,
)


class PhaseClock:
    """Seconds per phase per round: `rounds[r][phase]`, r counting from 1 with each aggregation."""

    def __init__(self, device: torch.device):
        self.device = device
        self.round = 1
        self.rounds: defaultdict[int, Counter] = defaultdict(Counter)

    def timed(self, phase: str, fn: Callable, synchronised: bool = False, ends_round: bool = False) -> Callable:
        sync = synchronised and self.device.type == "cuda"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if sync:
                torch.cuda.synchronize(self.device)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if sync:
                    torch.cuda.synchronize(self.device)
                self.rounds[self.round][phase] += time.perf_counter() - start
                if ends_round:
                    self.round += 1

        return wrapper


# (owner, attribute, phase, device-synchronised, ends the round): every name the module docstring's table times
TIMED = (
    (adapter.RuleStrategy, "configure_fit", "configure_fit", False, False),
    (client_adapter.RuleClient, "train", "train", False, False),
    (dispatch.BatchedDispatcher, "_prepare", "prepare", False, False),
    (dispatch, "train_stacked", "train_stacked", False, False),
    (graph.RecordedStep, "_warm_up", "eager_step0", True, False),
    (graph.RecordedStep, "_record", "record_step1", True, False),
    (client_adapter.RuleClient, "finish", "finish", False, False),
    (client_adapter, "to_host", "to_host", False, False),
    (adapter.RuleStrategy, "aggregate_fit", "aggregate_fit", False, True),
    (accounting, "local_consistency", "consistency", False, False),
)


@contextmanager
def timers(clock: PhaseClock) -> Iterator[None]:
    """The TIMED functions wrapped for the block, put back after it."""
    with ExitStack() as restore:
        for owner, name, phase, synchronised, ends_round in TIMED:
            original = getattr(owner, name)
            setattr(owner, name, clock.timed(phase, original, synchronised, ends_round))
            restore.callback(setattr, owner, name, original)
        yield


TRAINING = ("train_stacked", "train")  # the phases that train: a batched group, a client one at a time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.round_phases", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--algorithm", default="fedavg", help="one algorithm (--algorithms: several)")
    parser.add_argument(
        "--algorithms", default="", help="comma-separated algorithms, one run each (overrides --algorithm)"
    )
    parser.add_argument("--one-at-a-time", action="store_true", help="batch-clients=false (default: batched)")
    parser.add_argument("--autocast", choices=("none", "bf16"), default="none", help="run-config autocast")
    args = workload_arguments(parser, argv, "run")
    algorithms = [a.strip() for a in (args.algorithms or args.algorithm).split(",") if a.strip()]
    device = torch.device(args.device)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    report: dict = {"device": str(device), "algorithms": {}}
    with tempfile.TemporaryDirectory(prefix="round-phases-") as tmp:
        data_dir = args.data_dir or str(write_fake_cifar10(Path(tmp), args.clients * args.samples, 1000))
        configs = {algorithm: run_config_of(args, algorithm, data_dir) for algorithm in algorithms}
        try:  # every name and value checked before anything trains
            for run_config in configs.values():
                resolve(run_config)
        except ConfigError as err:
            parser.error(one_line(err))
        reuse_host_memory(args.host_memory == "reuse")
        for algorithm, run_config in configs.items():
            report["algorithms"][algorithm] = phases_of(args, algorithm, run_config, device)
            if args.json:  # after every algorithm: a run stopped by a time limit keeps what it measured
                Path(args.json).write_text(json.dumps(report, indent=2))
    if len(algorithms) > 1:
        summary(report["algorithms"])
    return 0


def run_config_of(args, algorithm: str, data_dir: str) -> dict:
    run_config = reference_config(args, algorithm, data_dir)
    return run_config if args.one_at_a_time else {**run_config, **BATCHED}


def phases_of(args, algorithm: str, run_config: dict, device: torch.device) -> dict:
    """One run with the timers on, its block printed (module docstring); its figures."""
    clock = PhaseClock(device)
    with timers(clock):
        result = suite_path(run_config, device)
    path = "one at a time" if args.one_at_a_time else "batched"
    print(f"{algorithm} {path} on {device}; round seconds {[round(s, 3) for s in result['seconds']]}; "
          f"server rule {result['rule']}")  # fmt: skip
    for label, reasons in (("fell back to one at a time", result["fell_back"]),
                           ("steps not recorded", result["not_recorded"])):  # fmt: skip
        if reasons:  # the phases are then not those of a batched (or recorded) round: said, as gpu_round says it
            print(f"{label}: {'; '.join(reasons)}")
    rounds = []
    for number, seconds in zip(sorted(clock.rounds), result["seconds"], strict=False):
        phases = dict(sorted(clock.rounds[number].items()))
        rounds.append({"round": number, "seconds": seconds, "phases": phases})
        print(
            f"round {number}: {seconds:.3f} s  " + "  ".join(f"{phase} {value:.3f}" for phase, value in phases.items())
        )
    training = [sum(r["phases"].get(phase, 0.0) for phase in TRAINING) for r in rounds]
    figures = {"rounds": rounds, "round_s": result["steady_s"], "fell_back": result["fell_back"],
               "training_s": statistics.median(training[1:] or training),
               "not_recorded": result["not_recorded"], "rule": result["rule"]}  # fmt: skip
    figures["round_over_training"] = figures["round_s"] / figures["training_s"] if figures["training_s"] else None
    print(f"training_s {figures['training_s']:.3f}  round_s {figures['round_s']:.3f}  "
          f"round_over_training {shown(figures['round_over_training'])}")  # fmt: skip
    print(f"steady_s {result['steady_s']:.3f}", flush=True)
    return figures


def summary(algorithms: dict) -> None:
    """One line per algorithm, then the worst round ÷ training."""
    for algorithm, figures in algorithms.items():
        print(f"{algorithm:<9} training {figures['training_s']:.3f} s  round {figures['round_s']:.3f} s  "
              f"round_over_training {shown(figures['round_over_training'])}")  # fmt: skip
    ratios = [f["round_over_training"] for f in algorithms.values() if f["round_over_training"] is not None]
    print(f"round_over_training_max {shown(max(ratios) if ratios else None)}")


if __name__ == "__main__":
    raise SystemExit(main())
