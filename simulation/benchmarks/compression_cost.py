"""Time each compressor of fedsuite/compression/ on a ResNet-18-sized vector against one client's local round.

    python -m simulation.benchmarks.compression_cost --steps 5 --batch-size 32 --fraction 0.01 --levels 15

The vector is the flat parameter vector of `model='resnet18-gn'` (fedsuite's model factory, 10 classes; 11.2M
entries); the local round is `fedsuite.local.loop.train_local` for `--steps` SGD steps of `--batch-size` random
CIFAR-shaped inputs (3×32×32) with the same model, on the same device. For each compressor (k = `--fraction`·d for
top-k and random-k, s = `--levels` for QSGD) it prints the seconds of compress + decompress (bytes included), the
bytes sent against 4d, and the ratio of its seconds to the local round's; each figure is the best of `--repeats`.
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


def local_round(model: FlatModel, steps: int, batch: int) -> Callable[[], object]:
    """One client's round: `steps` SGD steps of `batch` random CIFAR-shaped inputs from the model's current x."""
    device = model.device
    samples = 4 * batch
    data = LocalData(torch.randn(samples, 3, 32, 32, device=device), torch.randint(0, 10, (samples,), device=device))
    x0 = model.x.detach().clone()
    loss = loss_function("classification")

    def run() -> object:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.compression_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.01, help="top-k and random-k keep this share of d")
    parser.add_argument("--levels", type=int, default=15, help="QSGD's s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = FlatModel(build_model("resnet18-gn", (3, 32, 32), 10, "classification"), device)
    x = model.x.detach().clone()
    d = x.numel()
    round_work = local_round(model, args.steps, args.batch_size)
    round_work()  # warm-up
    round_s = best_seconds(round_work, device, args.repeats)
    print(f"d = {d}; local round ({args.steps} steps of {args.batch_size} on {device}): {round_s:.3f} s", flush=True)
    report = {"d": d, "device": str(device), "steps": args.steps, "batch_size": args.batch_size, "round_s": round_s}
    for name, compressor in compressors(d, args.fraction, args.levels).items():
        work = round_trip(compressor, x, device)
        work()  # warm-up
        seconds = best_seconds(work, device, args.repeats)
        size = compressor.encoded_bytes(d)
        report[name] = {"seconds": seconds, "bytes": size, "ratio_to_round": seconds / round_s}
        print(f"{name:>16}: {seconds:.3f} s compress+decompress, {size} bytes ({4 * d / size:.1f}× smaller), "
              f"ratio to the local round {seconds / round_s:.3f}", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
