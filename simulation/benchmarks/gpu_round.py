"""A round of the reference workload on one device: the whole suite against a bare loop doing the same work.

    python -m simulation.benchmarks.gpu_round                       # ResNet-18-GN, 10 clients × 50 steps of batch 50
    python -m simulation.benchmarks.gpu_round --model cnn --clients 2 --steps 2 --rounds 2 --device cpu   # a check

All paths run in this process on one device, on the same CIFAR-10-shaped data (random files written to a temporary
folder unless --data-dir names a folder holding cifar-10-batches-py/), the same partition, initial model, cohorts
(every client every round), minibatch order and learning-rate schedule (lr 0.01, weight decay 1e-3, clipping at 10):

- suite: `fedsuite.run.inprocess.run_inprocess` (the ServerApp's strategy, the ClientApp's clients, Flower's round
  loop), one client at a time, each algorithm of --algorithms;
- batched: the same with run-config batch-clients=true, where this fedsuite has that key;
- bare: the loop of simulation/benchmarks/local_loop.py (`fedsuite.local.loop.train_local`, no Flower) for each client,
  then the mean of the clients' models on the device (FedAvg's aggregate, in float64 as the server forms it). It
  runs the SGD rule, or the SAM rule (two gradients per step) for the two-gradient algorithms; for FedAvg it does
  exactly the suite's work, so their training losses agree (`train_loss_max_abs_diff`).

A round is timed from the end of the previous round's aggregation to the end of its own, so the central evaluation
of round 0 and of the last round is not counted; the steady figure is the median of rounds 2..R (round 1 warms up).
Prints each path's seconds per round and peak device memory, the ratios suite/bare and batched/suite, the card and
torch version; the last line is `gpu_suite_ratio <x>`, the worst algorithm's suite/bare (`n/a` when --paths leaves
out the suite or the bare path).

In the same process, before the paths, the card's bounds for the same arithmetic (simulation/benchmarks/
step_bounds.py): `bound_s`, the batched path's stacked step alone recorded as one CUDA graph and replayed --steps
times, and `dense_s`, ONE model on all the clients' samples at once, recorded and replayed the same way (on a CPU
both run eagerly, and their lines say so); for two-gradient algorithms also `bound_sam_s` and `dense_sam_s`. Each
batched row is followed by `bound_ratio` (the batched round ÷ its rule's stacked bound) and `dense_ratio` (÷ the
one-model bound). --variant adds a batched row with more run-config keys (`dp-sgd=true`, …) and its ratio to the
plain batched row; --host-rule the batched row with the server rule kept on the host and `host_rule_over_batched`.
Each batched row ends with where its server rule was kept.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest.mock import patch

import numpy as np
import torch

from fedsuite.config.keys import parse_pairs
from fedsuite.config.run_config import resolve
from fedsuite.config.schema import ConfigError
from fedsuite.data import load_dataset
from fedsuite.local.loop import SharpnessAware, UpdateRule, train_local
from fedsuite.node.holdings import ClientNode
from fedsuite.run.inprocess import run_inprocess
from fedsuite.server.app import initial_model
from fedsuite.server.observers import RoundObserver
from fedsuite.state.host_memory import reuse_host_memory
from simulation.benchmarks import step_bounds
from simulation.benchmarks.fake_cifar import write_fake_cifar10

# the SAM rule's cost: algorithms whose point takes two gradients a step (clients/fedsam.py, fedspeed.py, fedsmoo.py …)
TWO_GRADIENTS = frozenset({"fedsam", "mofedsam", "fedspeed", "fedspeed-ing", "fedgamma", "fedsmoo"})
PATHS = ("suite", "batched", "bare")
SAM_RHO = 0.1  # as simulation/benchmarks/local_loop.py
BATCHED = {"batch-clients": True}
HOST_MEMORY = {"reuse": "kept for reuse", "return": "returned to the OS"}  # --host-memory, as the header says it
STEPWISE = {"cuda-graphs": False}  # batched, every step launched as usual (no CUDA graph)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reference_config(args, algorithm: str, data_dir: str) -> dict:
    """The run config of the suite's path (the bare path reads the same)."""
    return {
        "algorithm": algorithm, "dataset": "cifar10", "data-dir": data_dir, "model": args.model,
        "num-clients": args.clients, "sampling": "fixed", "clients-per-round": args.clients,
        "local-steps": args.steps, "batch-size": args.batch, "lr": 0.01, "weight-decay": 1e-3, "clip-norm": 10.0,
        "num-server-rounds": args.rounds, "eval-every": args.rounds + 1, "device": args.device,
        "client-threads": torch.get_num_threads(), "seed": 0,
        "reuse-host-memory": args.host_memory == "reuse",
        **({"autocast": args.autocast} if getattr(args, "autocast", "none") != "none" else {}),
        **({"batch-chunk": args.chunk} if getattr(args, "chunk", 0) else {}),
    }  # fmt: skip


class RoundClock(RoundObserver):
    """Each round's seconds (end of the previous aggregation → end of this one) and its training loss."""

    watches_vectors = False  # it reads no vector: the run may keep its rule on the device

    def __init__(self, device: torch.device):
        self.device, self.seconds, self.losses = device, [], []
        self._last = time.perf_counter()

    def aggregated(self, server_round, strategy, x_before, replies) -> None:
        sync(self.device)
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now

    def recorded(self, row: dict) -> None:
        if row["round"] > 0:
            self.losses.append(row.get("train_loss"))
        self._last = time.perf_counter() if row["round"] == 0 else self._last


def steady(seconds: list[float]) -> float:
    """The median of rounds 2..R (all rounds when there is only one)."""
    return statistics.median(seconds[1:] or seconds)


def peak_mib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


class FallBacks(logging.Handler):
    """The `fedsuite │ batch-clients:` warnings of a run (why some of its clients trained one at a time), its
    `fedsuite │ cuda-graphs:` lines (why a group's steps were not recorded) and where its server rule was kept
    (`rule`: the log line's words, docs/running/batched.md#the-server-rule-on-the-device)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.unrecorded: list[str] = []
        self.rule = "on the host (no round's replies all stayed on a card)"

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "the server rule's vectors stay" in message:
            self.rule = message.split("the server rule's vectors stay", 1)[1].strip()
        elif "batch-clients:" in message and record.levelno >= logging.WARNING:
            self.lines.append(message.split("batch-clients:", 1)[1].strip())
        elif "cuda-graphs:" in message:
            self.unrecorded.append(message.split("cuda-graphs:", 1)[1].strip())


def suite_path(run_config: dict, device: torch.device) -> dict:
    """The run's round times, losses and peak memory, and `fell_back`: the reasons any of its clients trained one at
    a time under batch-clients=true (a batched row that fell back measures one-at-a-time training, and says so)."""
    reset_peak(device)
    clock, fallbacks = RoundClock(device), FallBacks()
    logger = logging.getLogger("flwr.fedsuite")
    logger.addHandler(fallbacks)
    level = logger.level
    logger.setLevel(min(level or logging.INFO, logging.INFO))  # the cuda-graphs lines are info
    try:
        run_inprocess(run_config, observers=[clock])
    finally:
        logger.removeHandler(fallbacks)
        logger.setLevel(level)
    return {"seconds": clock.seconds, "losses": clock.losses, "steady_s": steady(clock.seconds),
            "peak_mib": peak_mib(device), "fell_back": fallbacks.lines,
            "not_recorded": fallbacks.unrecorded, "rule": fallbacks.rule}  # fmt: skip


def bare_path(run_config: dict, two_gradients: bool, device: torch.device) -> dict:
    """The local loop for every client, then the float64 mean of their displacements on the device; in a worker
    thread with the clients' torch threads, as the suite's clients train in Flower's worker thread."""
    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(_bare_rounds, run_config, two_gradients, device).result()


def _bare_rounds(run_config: dict, two_gradients: bool, device: torch.device) -> dict:
    cfg = resolve(run_config)
    local, count = cfg.local, cfg.num_clients
    torch.set_num_threads(local.client_threads)
    x = torch.as_tensor(initial_model(cfg, load_dataset(cfg)), device=device)
    nodes = [ClientNode(cfg, pid, count) for pid in range(count)]
    model, loss_fn = nodes[0].model, nodes[0].loss_fn
    for node in nodes:  # the clients' data on the device, as the suite's warm-up round leaves it
        node.data  # noqa: B018
    sizes = np.array([len(node.data) for node in nodes], np.float64)
    weights = sizes.copy() if cfg.aggregation.weighting == "samples" else np.ones(count)
    weights /= weights.sum()  # as fedsuite.rules.server_rule.ServerRule.cohort_mean
    reset_peak(device)
    seconds, losses = [], []
    for server_round in range(1, cfg.run_control.num_rounds + 1):
        sync(device)
        start = time.perf_counter()
        lr = local.lr * local.lr_decay ** (server_round - 1)
        total = torch.zeros(x.numel(), dtype=torch.float64, device=device)
        loss = 0.0
        for node, weight, size in zip(nodes, weights, sizes, strict=True):
            rule = UpdateRule(point=SharpnessAware(SAM_RHO)) if two_gradients else UpdateRule()
            result = train_local(model, x, node.data, loss_fn, rule, lr=lr, weight_decay=local.weight_decay,
                                 clip_norm=local.clip_norm, epochs=local.epochs, steps=local.steps,
                                 batch_size=local.batch_size, generator=node.generator(server_round))  # fmt: skip
            total += (result.x - x).double() * float(weight)
            loss += size * result.mean_loss
        x = (x.double() + total).float()
        sync(device)
        seconds.append(time.perf_counter() - start)
        losses.append(loss / sizes.sum())
    return {"seconds": seconds, "losses": losses, "steady_s": steady(seconds), "peak_mib": peak_mib(device)}


def batched_path(algorithm: str, run_config: dict, device: torch.device, name: str = "batched") -> dict:
    """The suite with batch-clients=true, its row printed (with the reasons any client fell back to one at a time),
    or `not_available` where this fedsuite has no such key."""
    try:
        resolve({**run_config, **BATCHED})
    except ConfigError as err:
        print(f"{algorithm:<9} batched: not available ({one_line(err)})", flush=True)
        return {"not_available": one_line(err)}
    result = suite_path({**run_config, **BATCHED}, device)
    fell = result["fell_back"]
    unrecorded = result["not_recorded"]
    print(row(algorithm, name, result) + (f" (fell back: {'; '.join(fell)})" if fell else "")
          + (f" (steps not recorded: {'; '.join(unrecorded)})" if unrecorded else "")
          + f" (server rule {result['rule']})", flush=True)  # fmt: skip
    return result


def one_line(err: BaseException) -> str:
    return " ".join(part.strip() for part in str(err).splitlines() if part.strip())


def loss_gap(a: list, b: list) -> float | None:
    if not a or not b or any(v is None for v in (*a, *b)):
        return None
    return max(abs(float(p) - float(q)) for p, q in zip(a, b, strict=True))


def row(algorithm: str, path: str, result: dict) -> str:
    peak = "" if result["peak_mib"] is None else f", peak {result['peak_mib']:.0f} MiB"
    return f"{algorithm:<9} {path}: {result['steady_s']:.3f} s/round{peak}"


def workload_arguments(parser: argparse.ArgumentParser, argv: list[str] | None, unit: str) -> argparse.Namespace:
    """The reference workload's flags (this command's and simulation.benchmarks.peers'), parsed and checked; `unit`
    is what each round is run per (a path, a side)."""
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=5, help=f"rounds per {unit}; round 1 warms up")
    parser.add_argument("--clients", type=int, default=10, help="clients, all of them in every round")
    parser.add_argument("--steps", type=int, default=50, help="local steps per client and round")
    parser.add_argument("--batch", type=int, default=50, help="batch size")
    parser.add_argument("--model", default="resnet18-gn", help="a built-in model name or package.module:factory")
    parser.add_argument("--samples", type=int, default=500, help="training samples per client in the fake data")
    parser.add_argument("--data-dir", default="", help="a folder holding cifar-10-batches-py/ (default: fake files)")
    parser.add_argument("--json", default="", help="also write every figure to this file")
    parser.add_argument("--chunk", type=int, default=0, help="run-config batch-chunk (0: the memory plan chooses)")
    parser.add_argument("--host-memory", choices=("reuse", "return"), default="reuse",
                        help="freed host buffers kept for reuse (the run-config default) or returned to the OS "
                        "(reuse-host-memory=false); every path of the command runs with the same")  # fmt: skip
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 warms up)")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.gpu_round", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--algorithms", default="fedavg,scaffold,fedspeed,fadamgt")
    parser.add_argument("--stepwise", action="store_true",
                        help="also the batched path with cuda-graphs=false (what recording saves)")  # fmt: skip
    parser.add_argument("--host-rule", action="store_true",
                        help="also the batched path with the server rule kept on the host (what keeping it on the "
                             "device saves)")  # fmt: skip
    parser.add_argument("--paths", default=",".join(PATHS), help=f"which of {', '.join(PATHS)} to run")
    parser.add_argument("--autocast", choices=("none", "bf16"), default="none",
                        help="run-config autocast of every path and bound")  # fmt: skip
    parser.add_argument("--variant", action="append", default=[], metavar="'KEY=VALUE …'",
                        help="also a batched row with these run-config keys added (repeatable)")  # fmt: skip
    parser.add_argument("--no-bounds", action="store_true", help="skip the stand-alone bounds")
    parser.add_argument("--bound-repeats", type=int, default=3, help="rounds each bound is timed (the median)")
    args = workload_arguments(parser, argv, "path")
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    args.paths = checked_paths(parser, args.paths)
    args.variants = checked_variants(parser, args.variant)
    if args.bound_repeats < 1:
        parser.error("--bound-repeats must be at least 1")
    device = torch.device(args.device)
    logging.getLogger("flwr").setLevel(logging.WARNING)  # no per-round lines from Flower's loop
    with tempfile.TemporaryDirectory(prefix="gpu-round-") as tmp:
        data_dir = args.data_dir or str(write_fake_cifar10(Path(tmp), args.clients * args.samples, 1000))
        try:
            for algorithm in algorithms:  # every name and value checked before anything trains
                for extra in ({}, *args.variants.values()):
                    resolve({**reference_config(args, algorithm, data_dir), **extra})
        except ConfigError as err:
            parser.error(one_line(err))
        report = measure(args, algorithms, data_dir, device)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    worst = report["gpu_suite_ratio"]
    print(f"gpu_suite_ratio {'n/a' if worst is None else f'{worst:.3f}'}")
    return 0


def checked_paths(parser: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        parser.error(f"--paths {text!r}: allowed values are {', '.join(PATHS)} (comma-separated)")
    return paths


def checked_variants(parser: argparse.ArgumentParser, texts: list[str]) -> dict[str, dict]:
    """Each --variant's text → its run-config keys (refused in one line when not key=value pairs)."""
    variants = {}
    for text in texts:
        try:
            variants[" ".join(text.split())] = parse_pairs(text)
        except ValueError as err:
            parser.error(f"--variant {text!r}: {err}")
    return variants


def measure(args, algorithms: list[str], data_dir: str, device: torch.device) -> dict:
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    applied = reuse_host_memory(args.host_memory == "reuse")  # the bare loop too: one allocator setting for all
    how = HOST_MEMORY[args.host_memory] if applied else "as the C library does by default (the setting was refused)"
    bf16 = ", bf16 autocast" if args.autocast == "bf16" else ""
    print(f"device {card}, torch {torch.__version__}; model {args.model} on CIFAR-10-shaped data, {args.clients} "
          f"clients × {args.steps} steps of batch {args.batch}{bf16}, {args.rounds} rounds (steady: median of rounds "
          f"2..{args.rounds}); freed host buffers {how}", flush=True)  # fmt: skip
    report: dict = {"device": card, "torch": torch.__version__, "model": args.model, "clients": args.clients,
                    "steps": args.steps, "batch": args.batch, "rounds": args.rounds, "autocast": args.autocast,
                    "paths": list(args.paths), "host_memory": args.host_memory if applied else "default",
                    "algorithms": {}}  # fmt: skip
    cfg = resolve(reference_config(args, algorithms[0], data_dir))
    report["d"] = int(initial_model(cfg, load_dataset(cfg)).size)
    rules = sorted({"sam" if a in TWO_GRADIENTS else "sgd" for a in algorithms})
    report["bounds"] = {}
    for rule in [] if args.no_bounds else rules:  # the card's bounds first: short, and kept if a path hangs
        work = step_bounds.Workload(args.model, args.clients, args.batch, args.steps, device, args.autocast, rule)
        report["bounds"][rule] = step_bounds.printed(work, args.bound_repeats)
    bare: dict[bool, dict] = {}
    for algorithm in algorithms:
        report["algorithms"][algorithm] = measure_algorithm(args, algorithm, data_dir, device, bare, report["bounds"])
        if args.json:  # after every algorithm: a run stopped by a time limit keeps what it measured
            Path(args.json).write_text(json.dumps(report, indent=2))
    ratios = [e["suite_over_bare"] for e in report["algorithms"].values() if e["suite_over_bare"] is not None]
    report["gpu_suite_ratio"] = max(ratios) if ratios else None
    return report


def measure_algorithm(args, algorithm: str, data_dir: str, device: torch.device, bare: dict, found: dict) -> dict:
    """One algorithm's paths of --paths, each row printed, then its ratios; `bare` caches the bare loop by rule."""
    run_config = reference_config(args, algorithm, data_dir)
    two = algorithm in TWO_GRADIENTS
    entry: dict = {}
    if "suite" in args.paths:
        entry["suite"] = suite_path(run_config, device)
        print(row(algorithm, "suite", entry["suite"]), flush=True)
    if "batched" in args.paths:
        entry["batched"] = batched_path(algorithm, run_config, device)
        if args.stepwise and "not_available" not in entry["batched"]:  # the same, without the recorded step
            entry["batched_stepwise"] = batched_path(algorithm, {**run_config, **STEPWISE}, device, "batched, stepwise")
        if args.host_rule and "not_available" not in entry["batched"]:
            host_rule_path(algorithm, run_config, device, entry)
        entry["variants"] = {text: batched_path(algorithm, {**run_config, **keys}, device, f"batched ({text})")
                             for text, keys in args.variants.items()}  # fmt: skip
        rule = "sam" if two else "sgd"
        entry.update(step_bounds.ratios(algorithm, steady_of(entry, "batched"), found.get(rule), rule))
        variant_ratios(algorithm, entry)
    if "bare" in args.paths:
        if two not in bare:
            bare[two] = bare_path(run_config, two, device)
        entry["bare"] = {**bare[two], "rule": "sam" if two else "sgd"}
        print(row(algorithm, f"bare ({entry['bare']['rule']} loop)", entry["bare"]), flush=True)
    path_ratios(algorithm, entry)
    return entry


def host_rule_path(algorithm: str, run_config: dict, device: torch.device, entry: dict) -> None:
    """The batched path again with the server rule kept on the host (docs/running/batched.md#the-server-rule-on-the-
    device), and `host_rule_over_batched`, printed."""
    with patch("fedsuite.batched.server.allowed_on", lambda where: False):
        entry["batched_host_rule"] = batched_path(algorithm, run_config, device, "batched, rule on the host")
    host, batched = steady_of(entry, "batched_host_rule"), steady_of(entry, "batched")
    entry["host_rule_over_batched"] = None if host is None or not batched else host / batched
    print(f"{algorithm:<9} host_rule_over_batched {shown(entry['host_rule_over_batched'])}", flush=True)


def shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def steady_of(entry: dict, path: str) -> float | None:
    return entry.get(path, {}).get("steady_s")


def variant_ratios(algorithm: str, entry: dict) -> None:
    """Each variant's batched round over the plain batched one, printed."""
    batched = steady_of(entry, "batched")
    for text, variant in entry["variants"].items():
        seconds = variant.get("steady_s")
        variant["over_batched"] = None if seconds is None or batched is None else seconds / batched
        if variant["over_batched"] is not None:
            print(f"{algorithm:<9} variant_over_batched {variant['over_batched']:.3f}  ({text})", flush=True)


def path_ratios(algorithm: str, entry: dict) -> None:
    """suite/bare, batched/suite and, where the paths did the same work, the training losses' largest gap; printed
    in one line (n/a where a path did not run)."""
    suite, bare, batched = steady_of(entry, "suite"), steady_of(entry, "bare"), steady_of(entry, "batched")
    entry["suite_over_bare"] = None if suite is None or bare is None else suite / bare
    entry["batched_over_suite"] = None if batched is None or suite is None else batched / suite
    losses = entry.get("suite", {}).get("losses")
    entry["train_loss_max_abs_diff_bare"] = (
        loss_gap(losses, entry.get("bare", {}).get("losses")) if algorithm == "fedavg" else None
    )
    entry["train_loss_max_abs_diff_batched"] = loss_gap(losses, entry.get("batched", {}).get("losses"))
    ratios = [
        f"{name} {'n/a' if entry[key] is None else f'{entry[key]:.3f}'}"
        for name, key in (("suite/bare", "suite_over_bare"), ("batched/suite", "batched_over_suite"))
    ]
    gaps = [f"{path} {entry[f'train_loss_max_abs_diff_{path}']:.3g}" for path in ("bare", "batched")
            if entry[f"train_loss_max_abs_diff_{path}"] is not None]  # fmt: skip
    same = f"  train_loss_max_abs_diff: {', '.join(gaps)}" if gaps else ""
    print(f"{algorithm:<9} {'  '.join(ratios)}{same}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
