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
| `prepare` | each batched client built and given its downlink (on the device) |
| `train_stacked` | the batched groups' training, until its losses are on the host |
| `eager_step0`, `record_step1` | inside it, on CUDA: step 1 run as usual, the recording of step 2 (synchronised) |
| `finish` | each client's uplink, state save and reply arrays |
| `to_host` | inside it, the uplinks brought back from the device |
| `aggregate_fit` | the server's checks, aggregation and the round's figures |
| `consistency` | inside it, the local-consistency figure |

Where some clients of a batched run trained one at a time, or a group's steps were not recorded, a line after the
first says why (as gpu_round's rows do). The last line is `steady_s <s>`: the median of rounds 2..R, as gpu_round
measures a round.
"""

from __future__ import annotations

import argparse
import functools
import logging
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
from simulation.benchmarks.gpu_round import BATCHED, one_line, reference_config, suite_path, workload_arguments


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.round_phases", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--one-at-a-time", action="store_true", help="batch-clients=false (default: batched)")
    args = workload_arguments(parser, argv, "run")
    device = torch.device(args.device)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    clock = PhaseClock(device)
    with tempfile.TemporaryDirectory(prefix="round-phases-") as tmp:
        data_dir = args.data_dir or str(write_fake_cifar10(Path(tmp), args.clients * args.samples, 1000))
        run_config = reference_config(args, args.algorithm, data_dir)
        if not args.one_at_a_time:
            run_config.update(BATCHED)
        try:  # every name and value checked before anything trains
            resolve(run_config)
        except ConfigError as err:
            parser.error(one_line(err))
        reuse_host_memory(args.host_memory == "reuse")
        with timers(clock):
            result = suite_path(run_config, device)
    path = "one at a time" if args.one_at_a_time else "batched"
    print(f"{args.algorithm} {path} on {device}; round seconds {[round(s, 3) for s in result['seconds']]}")
    for label, reasons in (("fell back to one at a time", result["fell_back"]),
                           ("steps not recorded", result["not_recorded"])):  # fmt: skip
        if reasons:  # the phases are then not those of a batched (or recorded) round: said, as gpu_round says it
            print(f"{label}: {'; '.join(reasons)}")
    for number, seconds in zip(sorted(clock.rounds), result["seconds"], strict=False):
        phases = "  ".join(f"{phase} {value:.3f}" for phase, value in sorted(clock.rounds[number].items()))
        print(f"round {number}: {seconds:.3f} s  {phases}")
    print(f"steady_s {result['steady_s']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
