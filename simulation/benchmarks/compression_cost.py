"""Time each compressor of fedsuite/compression/ on a ResNet-18-sized vector against one client's local round of the
reference workload, and say which compressors cost at most 5 % of that round.

    python -m simulation.benchmarks.compression_cost                         # the reference round, on the CPU
    python -m simulation.benchmarks.compression_cost --steps 5 --batch-size 32 --round-repeats 3   # a quick look

The vector is the flat parameter vector of `model='resnet18-gn'` (fedsuite's model factory, 10 classes; 11,181,642
entries). The round is one client's local round of the suite's reference workload (docs/gpu/index.md: ResNet-18-GN,
50 steps of batch 50 per client, 500 local samples, random crop with padding 4 and flip on every batch; lr 0.01,
weight decay 1e-3, clipping at 10): `fedsuite.local.loop.train_local` on random CIFAR-shaped inputs (3×32×32), on
the same device; `--steps` and `--batch-size` override it. For each compressor (k = `--fraction`·d for top-k and
random-k, s = `--levels` for QSGD) it prints the seconds of compress + decompress (bytes included), of the server's
side alone (decompress), the bytes sent against 4d, and the ratio of the round trip's seconds to the round's; the
last line names the compressors whose ratio is at most `--budget` (0.05) and those above it. A compressor's figure
is the best of `--repeats` after a warm-up; the round's the best of `--round-repeats` (1 by default, as it is long)
after a warm-up of 2 steps. Both are measured in the same run, so a machine loaded by other work inflates both.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

from fedsuite.compression import QSGD, Compressor, Identity, RandK, ScaledSign, TopK
from fedsuite.local.loop import LocalData, UpdateRule, train_local
from fedsuite.models.networks import FlatModel, build_model, loss_function

REFERENCE_STEPS, REFERENCE_BATCH, REFERENCE_SAMPLES = 50, 50, 500  # docs/gpu/index.md: the reference workload
BUDGET = 0.05  # the goal: compress + decompress at most 5 % of a client's round


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(work: Callable[[], object], device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        work()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


def local_round(model: FlatModel, steps: int, batch: int, samples: int) -> Callable[[], object]:
    """One client's round: `steps` SGD steps of `batch` of `samples` random CIFAR-shaped inputs (random crop with
    padding 4 and flip, as the reference workload) from the model's current x."""
    device = model.device
    data = LocalData(torch.randn(samples, 3, 32, 32, device=device),
                     torch.randint(0, 10, (samples,), device=device), crop_pad=4)  # fmt: skip
    x0 = model.x.detach().clone()
    loss = loss_function("classification")

    def run(steps: int = steps) -> object:
        generator = torch.Generator().manual_seed(0)
        return train_local(model, x0, data, loss, UpdateRule(), lr=0.01, weight_decay=1e-3, clip_norm=10.0,
                           epochs=1, steps=steps, batch_size=batch, generator=generator)  # fmt: skip

    return run


def compressors(d: int, fraction: float, levels: int) -> dict[str, Compressor]:
    k = max(1, round(fraction * d))
    return {"none": Identity(), f"topk (k={k})": TopK(k), f"randk (k={k})": RandK(k),
            f"qsgd (s={levels})": QSGD(levels), "sign": ScaledSign()}  # fmt: skip


def round_trip(compressor: Compressor, x: torch.Tensor, device: torch.device) -> Callable[[], object]:
    generator = torch.Generator(device=device).manual_seed(0)
    return lambda: compressor.decompress(compressor.compress(x, generator), x.numel(), device)


def server_side(compressor: Compressor, x: torch.Tensor, device: torch.device) -> Callable[[], object]:
    encoded = compressor.compress(x, torch.Generator(device=device).manual_seed(0))
    return lambda: compressor.decompress(encoded, x.numel(), device)


def time_compressor(compressor: Compressor, x: torch.Tensor, device: torch.device, repeats: int) -> dict:
    """Seconds of the round trip and of decompress alone (each the best of `repeats` after a warm-up), and bytes."""
    figures = {}
    for name, make in (("seconds", round_trip), ("decompress_seconds", server_side)):
        work = make(compressor, x, device)
        work()  # warm-up
        figures[name] = best_seconds(work, device, repeats)
    return figures | {"bytes": compressor.encoded_bytes(x.numel())}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.compression_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=REFERENCE_STEPS, help="local steps of the round")
    parser.add_argument("--batch-size", type=int, default=REFERENCE_BATCH)
    parser.add_argument("--samples", type=int, default=REFERENCE_SAMPLES, help="local samples of the client")
    parser.add_argument("--fraction", type=float, default=0.01, help="top-k and random-k keep this share of d")
    parser.add_argument("--levels", type=int, default=15, help="QSGD's s")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each compressor (the best counts)")
    parser.add_argument("--round-repeats", type=int, default=1, help="timed rounds (the best counts)")
    parser.add_argument("--budget", type=float, default=BUDGET, help="the largest ratio that meets the goal")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = FlatModel(build_model("resnet18-gn", (3, 32, 32), 10, "classification"), device)
    x = model.x.detach().clone()
    d = x.numel()
    round_work = local_round(model, args.steps, args.batch_size, args.samples)
    round_work(min(2, args.steps))  # warm-up
    round_s = best_seconds(round_work, device, args.round_repeats)
    print(f"d = {d}; client round ({args.steps} steps of batch {args.batch_size} on {device}): {round_s:.3f} s",
          flush=True)  # fmt: skip
    report = {"d": d, "device": str(device), "steps": args.steps, "batch_size": args.batch_size, "round_s": round_s,
              "torch_threads": torch.get_num_threads(), "budget": args.budget}  # fmt: skip
    for name, compressor in compressors(d, args.fraction, args.levels).items():
        figures = time_compressor(compressor, x, device, args.repeats)
        report[name] = figures | {"ratio_to_round": figures["seconds"] / round_s}
        print(f"{name:>16}: {figures['seconds']:.3f} s compress+decompress (decompress alone "
              f"{figures['decompress_seconds']:.3f} s), {figures['bytes']} bytes "
              f"({4 * d / figures['bytes']:.1f}× smaller), ratio to the round {figures['seconds'] / round_s:.4f}",
              flush=True)  # fmt: skip
    names = [name for name in report if isinstance(report[name], dict)]
    meet = [name for name in names if report[name]["ratio_to_round"] <= args.budget]
    miss = [name for name in names if name not in meet]
    listed = {kind: ", ".join(names) or "no compressor" for kind, names in (("meet", meet), ("miss", miss))}
    print(f"meet ratio ≤ {args.budget:g}: {listed['meet']}; above it: {listed['miss']}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
