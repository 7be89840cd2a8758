"""Time the shared local loop alone (no Flower, no Ray) on one device: the client compute of one round.

    python -m simulation.benchmarks.local_loop --model resnet18-gn --clients 10 --steps 50 --batch-size 50

CIFAR-shaped inputs (3×32×32, 10 classes) are random tensors made on the device, so no dataset is needed; each
"client" runs `fedsuite.local.loop.train_local` for `--steps` steps from the same start point, one after the other,
as a simulation worker does. Prints one line per rule (SGD = FedAvg's client, SAM = FedSAM/FedSpeed's two
gradients per step) with seconds per round and peak device memory, then `seconds_per_round <sgd value>` last.
Used for the GPU figures in docs/performance.md (the reference simulator: 15.9 s/round on a V100 for this workload).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from fedsuite.local.loop import LocalData, SharpnessAware, UpdateRule, train_local
from fedsuite.models.networks import FlatModel, build_model, loss_function


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def round_seconds(model: FlatModel, data: LocalData, rule_fn, clients: int, steps: int, batch: int) -> float:
    x0 = model.x.detach().clone()
    loss = loss_function("classification")
    sync(model.device)
    start = time.perf_counter()
    for client in range(clients):
        train_local(model, x0, data, loss, rule_fn(), lr=0.01, weight_decay=1e-3, clip_norm=10.0, epochs=1,
                    steps=steps, batch_size=batch, generator=torch.Generator().manual_seed(client))  # fmt: skip
    sync(model.device)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.local_loop", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default="resnet18-gn")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--samples", type=int, default=500, help="local samples per client")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up round")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--autocast", choices=("none", "bf16"), default="none", help="forward-pass autocast")
    parser.add_argument("--channels-last", action="store_true", help="NHWC inputs")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = FlatModel(build_model(args.model, (3, 32, 32), 10, "classification"), device, args.autocast,
                      args.channels_last)  # fmt: skip
    data = LocalData(torch.randn(args.samples, 3, 32, 32, device=device),
                     torch.randint(0, 10, (args.samples,), device=device), crop_pad=4)  # fmt: skip
    rules = {"sgd": UpdateRule, "sam": lambda: UpdateRule(point=SharpnessAware(0.1))}
    report = {"model": args.model, "device": str(device), "d": model.dim, "clients": args.clients,
              "steps": args.steps, "batch_size": args.batch_size, "autocast": args.autocast,
              "channels_last": args.channels_last}  # fmt: skip
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    for name, rule in rules.items():
        round_seconds(model, data, rule, args.clients, args.steps, args.batch_size)  # warm-up
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = [
            round_seconds(model, data, rule, args.clients, args.steps, args.batch_size) for _ in range(args.rounds)
        ]
        report[name] = {"seconds_per_round": min(times), "all": times}
        if device.type == "cuda":
            report[name]["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        print(f"{name}: {min(times):.3f} s/round ({args.clients} clients × {args.steps} steps), "
              f"peak {report[name].get('peak_memory_mib', float('nan')):.0f} MiB", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print(f"seconds_per_round {report['sgd']['seconds_per_round']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
