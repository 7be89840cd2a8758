"""Overhead of the suite's Flower simulation over a bare PyTorch loop doing the same local work.

    python -m simulation.benchmarks.overhead --quick        # 6 rounds, a few minutes on 2 CPU cores
    python -m simulation.benchmarks.overhead --quick --num-clients 100,1000,10000   # side by side per federation size

Both paths train the same model from the same initial x on the same cohorts (fedsuite.server.sampling.Sampler),
client data (fedsuite.node.holdings.ClientNode) and minibatch schedule (fedsuite.local.loop.minibatches with the node's
per-round generator), then take the plain mean of the client models (FedAvg with server-lr 1):
- suite: simulation.launcher.launch.run(...), a real `flwr run` Ray simulation, 1 CPU per client (2 actors on 2 cores);
  per-round `round_seconds` (configure_fit → end of evaluate) come from the run's rounds.jsonl;
- bare 2-proc (the headline baseline, same resources): a pool of 2 spawned processes with 1 torch thread each,
  created and warmed up with one uncounted round before timing; each round hands the cohort's clients to it;
- bare 1-proc (extra line): the same rounds in this process with 2 torch threads;
- in process, one at a time and batched: the same run through `fedsuite.run.inprocess.run_inprocess` (no Ray), its
  clients trained one after another, then with batch-clients=true as one stacked computation
  (docs/running/batched.md). `batched_ratio x`, printed just before the last line, is batched steady round / one-at-a-
  time steady round on that same path: below 1 = batching is faster; nan when the batched run fell back to one client
  at a time (the reason is printed).
Round 1 of the suite is its cold start (first data loads and imports in fresh actors; there is no per-node
discovery: the federation has as many SuperNodes as workers, whatever N) and the last round
also evaluates on the test set, so "steady" is the median over rounds 2..R-1 in every path
(fedsuite.results.folder.steady_seconds with skip_last=True). The last line,
`overhead_ratio x`, is suite steady round / bare 2-proc steady round: 1.00 = no overhead, 1.10 = 10 % overhead.
`train_loss_max_abs_diff` checks that the paths did the same work: round-1 losses agree up to float rounding
(the 2-thread path sums in another order), later rounds drift a little (about 1e-3) as rounding compounds.
A JSON file with every number is written next to the suite's results folder.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from fedsuite.config.run_config import resolve
from fedsuite.data import load_dataset
from fedsuite.local.loop import minibatches
from fedsuite.models.networks import build_model
from fedsuite.node.holdings import ClientNode
from fedsuite.results.folder import steady_seconds
from fedsuite.server.app import initial_model
from fedsuite.server.sampling import Sampler
from fedsuite.state.host_memory import reuse_host_memory
from simulation.benchmarks.gpu_round import suite_path
from simulation.launcher.launch import run
from simulation.launcher.project import PROJECT, pyproject_defaults

_state: dict = {}  # per process: cfg, model, optimiser, loss function


def _init(values: dict, threads: int) -> None:
    """Build the process's one model and optimiser, load the dataset and partition, take one warm-up step."""
    torch.set_num_threads(threads)
    cfg = resolve(values)
    reuse_host_memory(cfg.run_control.reuse_host_memory)  # as the suite's processes do
    node = ClientNode(cfg, 0, int(cfg["num-clients"]))
    ds = node.dataset
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, ds.task)
    opt = torch.optim.SGD(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg["weight-decay"]))
    node.loss_fn(model(node.data.inputs[:8]), node.data.targets[:8]).backward()
    _state.update(cfg=cfg, model=model, opt=opt, loss_fn=node.loss_fn)


def local_work(server_round: int, pid: int, x: np.ndarray) -> tuple[np.ndarray, float, int, float]:
    """K plain SGD steps of client `pid` from x; returns (x_i, mean loss, n_i, seconds of the steps)."""
    cfg, model, opt, loss_fn = _state["cfg"], _state["model"], _state["opt"], _state["loss_fn"]
    node = ClientNode(cfg, pid, int(cfg["num-clients"]))
    data = node.data
    start = time.perf_counter()
    vector_to_parameters(torch.tensor(x), model.parameters())
    for group in opt.param_groups:
        group["lr"] = float(cfg["lr"]) * float(cfg["lr-decay"]) ** (server_round - 1)
    loss_sum, k = torch.zeros(()), 0
    batches = minibatches(data, int(cfg["local-epochs"]), int(cfg["local-steps"]), int(cfg["batch-size"]),
                          node.generator(server_round))  # fmt: skip
    for inputs, targets in batches:
        opt.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        opt.step()
        loss_sum += loss.detach()
        k += 1
    xi = parameters_to_vector(model.parameters()).detach().numpy()
    return xi, float(loss_sum) / max(k, 1), len(data), time.perf_counter() - start


def bare_rounds(values: dict, x0: np.ndarray, sampler: Sampler, rounds: int, workers: int) -> list[dict]:
    """Timed rounds 1..R of the bare loop: `workers` processes × 1 thread, or this process × 2 threads."""
    pool = None
    if workers > 1:
        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(values, 1))
        mapper = pool.map
    else:
        _init(values, 2)
        mapper = map

    def one_round(r: int, x: np.ndarray) -> tuple[np.ndarray, dict]:
        start = time.perf_counter()
        out = list(mapper(local_work, repeat(r), sampler.cohort(r), repeat(x)))
        x_new = np.stack([o[0] for o in out]).astype(np.float64).mean(0).astype(np.float32)
        seconds = time.perf_counter() - start
        n = sum(o[2] for o in out)
        return x_new, {"round": r, "round_seconds": seconds, "client_compute_seconds": sum(o[3] for o in out),
                       "train_loss": sum(o[1] * o[2] for o in out) / n}  # fmt: skip

    try:
        if pool is not None:
            one_round(1, x0)  # warm-up, not counted: both workers started, data and kernels loaded
        x, rows = x0, []
        for r in range(1, rounds + 1):
            x, row = one_round(r, x)
            rows.append(row)
        return rows
    finally:
        if pool is not None:
            pool.shutdown()


def measure(args, rounds: int, num_clients: int, out_dir: Path, one_process: bool = True) -> dict:
    """One federation size: the suite through `flwr run`, then the bare paths (the 1-process one only if asked);
    returns the numbers and rows."""
    overrides = {
        "algorithm": "fedavg", "dataset": "fashion-mnist", "model": args.model, "num-clients": num_clients,
        "sampling": "fixed", "clients-per-round": args.clients_per_round, "local-steps": args.local_steps,
        "batch-size": 50, "lr": 0.05, "num-server-rounds": rounds, "eval-every": rounds + 1, "seed": 0,
        "device": "cpu", "client-threads": 1, "out-dir": str(out_dir), "run-name": f"benchmark-suite-n{num_clients}",
        "overwrite": True,
    }  # fmt: skip
    values = {**pyproject_defaults(), **overrides}
    cfg = resolve(values)
    reuse_host_memory(cfg.run_control.reuse_host_memory)  # the 1-process bare path runs here
    sampler = Sampler(cfg["num-clients"], "fixed", cfg["clients-per-round"], seed=cfg["seed"])
    x0 = initial_model(cfg, load_dataset(cfg))

    print(f"suite: flwr run, {rounds} rounds, {args.clients_per_round} of {num_clients} clients ...", flush=True)
    start = time.perf_counter()
    folder = run(overrides, cpus_per_client=1.0, gpus_per_client=0.0, quiet=True)
    suite_wall = time.perf_counter() - start
    lines = (folder / "rounds.jsonl").read_text().splitlines()
    suite = [row for row in map(json.loads, lines) if row["round"] > 0]
    print("bare: 2 processes x 1 thread ...", flush=True)
    bare = bare_rounds(values, x0, sampler, rounds, workers=2)
    seq = bare
    if one_process:
        print("bare: 1 process x 2 threads ...", flush=True)
        seq = bare_rounds(values, x0, sampler, rounds, workers=1)

    print_rounds(suite, bare, seq, rounds, one_process)
    one_at_a_time, batched = inprocess_paths(overrides)
    numbers = {"num_clients": num_clients, "suite_wall_s": suite_wall, **path_numbers(suite, bare, seq)}
    numbers["inprocess_steady_round_s"] = one_at_a_time["steady_s"]
    numbers["batched_steady_round_s"] = batched["steady_s"]
    # a batched run whose clients fell back to one at a time timed no batching: no ratio (nan), the reason printed
    numbers["batched_ratio"] = float("nan") if batched["fell_back"] else batched["steady_s"] / one_at_a_time["steady_s"]
    rows = {"suite": suite, "bare_2proc": bare, "bare_1proc": seq, "inprocess_seconds": one_at_a_time["seconds"],
            "batched_seconds": batched["seconds"]}  # fmt: skip
    return {"config": overrides, "suite_folder": str(folder), **numbers, "batched_fell_back": batched["fell_back"],
            "rounds": rows}  # fmt: skip


def path_numbers(suite: list[dict], bare: list[dict], seq: list[dict]) -> dict:
    """The Ray suite's and the bare paths' steady rounds, their ratios, and how far their losses drift apart."""
    pairs = [(s, o) for s, b, q in zip(suite, bare, seq, strict=True) for o in (b, q)]
    numbers = {
        "suite_cold_start_s": suite[0]["round_seconds"],
        "suite_steady_round_s": steady_seconds(suite, skip_last=True),
        "suite_client_compute_s": steady_seconds(suite, "client_compute_seconds", skip_last=True),
        "bare_steady_round_s": steady_seconds(bare, skip_last=True),
        "bare_client_compute_s": steady_seconds(bare, "client_compute_seconds", skip_last=True),
        "bare_1proc_steady_round_s": steady_seconds(seq, skip_last=True),
        "train_loss_max_abs_diff": max(abs(s["train_loss"] - o["train_loss"]) for s, o in pairs),
    }
    numbers["overhead_ratio_1proc"] = numbers["suite_steady_round_s"] / numbers["bare_1proc_steady_round_s"]
    numbers["overhead_ratio"] = numbers["suite_steady_round_s"] / numbers["bare_steady_round_s"]
    return numbers


def inprocess_paths(overrides: dict) -> tuple[dict, dict]:
    """The same run in this process, its clients one at a time and then batched (gpu_round.suite_path: each round's
    seconds, the steady median of rounds 2..R); the batched run says why if any client fell back."""
    values = {k: v for k, v in overrides.items() if k not in ("out-dir", "run-name", "overwrite")}
    values["client-threads"] = torch.get_num_threads()  # one client trains at a time: it has the machine's threads
    print("in process: one client at a time, then batched ...", flush=True)
    device = torch.device("cpu")
    one_at_a_time = suite_path(values, device)
    batched = suite_path({**values, "batch-clients": True}, device)
    if batched["fell_back"]:
        print(f"batched fell back to one at a time: {'; '.join(batched['fell_back'])}", flush=True)
    return one_at_a_time, batched


def print_rounds(suite: list[dict], bare: list[dict], seq: list[dict], rounds: int, one_process: bool) -> None:
    """Every round's seconds in each path, side by side."""
    print(f"\n{'round':>5} {'suite s':>9} {'suite Σcompute s':>17} {'bare 2-proc s':>14} {'bare 1-proc s':>14}  note")
    for s, b, q in zip(suite, bare, seq, strict=True):
        note = "cold start" if s["round"] == 1 else ("suite evaluates" if s["round"] == rounds else "steady")
        one = f"{q['round_seconds']:>14.3f}" if one_process else f"{'-':>14}"
        print(f"{s['round']:>5} {s['round_seconds']:>9.3f} {s['client_compute_seconds']:>17.3f} "
              f"{b['round_seconds']:>14.3f} {one}  {note}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.overhead", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="6 rounds (a few minutes on 2 cores)")
    parser.add_argument("--rounds", type=int, default=None, help="R, rounds per path (default 12, --quick 6)")
    parser.add_argument("--num-clients", default="100",
                        help="N, clients in the federation; a comma-separated list (100,1000,10000) measures each "
                             "and prints them side by side")  # fmt: skip
    parser.add_argument("--clients-per-round", type=int, default=10, help="S, the cohort of every round")
    parser.add_argument("--local-steps", type=int, default=50, help="K, local SGD steps per client and round")
    parser.add_argument("--model", default="cnn", help="network (fashion-mnist: cnn, 2nn, logreg, resnet18-gn)")
    parser.add_argument("--out-dir", default=None, help="results folder (default results/benchmark/<timestamp>)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (6 if args.quick else 12)
    if rounds < 3:
        parser.error("--rounds must be >= 3 (steady rounds are 2..R-1)")
    sizes = [int(n) for n in str(args.num_clients).split(",") if n.strip()]
    out_dir = Path(args.out_dir or PROJECT / "results" / "benchmark" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    # Several sizes: the headline (same-resources) baseline only, to keep the benchmark short.
    reports = [measure(args, rounds, n, out_dir, one_process=len(sizes) == 1) for n in sizes]
    report = reports[0] if len(reports) == 1 else {"sizes": reports}
    (out_dir / "benchmark.json").write_text(json.dumps(report, indent=2))
    print(f"\nresults: {out_dir / 'benchmark.json'}")
    if len(reports) > 1:
        print_sizes(reports)
        return
    numbers = {k: v for k, v in reports[0].items() if isinstance(v, float)}
    last = ("batched_ratio", "overhead_ratio")  # the two headline figures, overhead_ratio last
    for key in [k for k in numbers if k not in last] + list(last):
        value = numbers[key]
        print(f"{key} {value:.3g}" if key == "train_loss_max_abs_diff" else f"{key} {value:.3f}")


def print_sizes(reports: list[dict]) -> None:
    """Several federation sizes side by side, then the worst size's batched and overhead ratios."""
    print(f"\n{'N':>7} {'cold start s':>13} {'suite steady s':>15} {'bare steady s':>14} {'overhead':>9} "
          f"{'flwr run wall s':>16}")  # fmt: skip
    for r in reports:
        cells = (
            f"{r['num_clients']:>7}",
            f"{r['suite_cold_start_s']:>13.2f}",
            f"{r['suite_steady_round_s']:>15.3f}",
            f"{r['bare_steady_round_s']:>14.3f}",
            f"{r['overhead_ratio']:>9.3f}",
            f"{r['suite_wall_s']:>16.1f}",
        )
        print(" ".join(cells))
    ratios = [r["batched_ratio"] for r in reports]  # nan where a size's batched run fell back
    print(f"batched_ratio {max(ratios) if all(x == x for x in ratios) else float('nan'):.3f}")
    print(f"overhead_ratio {max(r['overhead_ratio'] for r in reports):.3f}")  # the worst size


if __name__ == "__main__":
    main()
