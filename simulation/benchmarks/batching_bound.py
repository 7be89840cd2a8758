"""What batching a round's clients can save on one device at most: one model's gradient on all their samples at once.

    python -m simulation.benchmarks.batching_bound --model cnn --device cpu   # the default CNN, 10 clients × batch 50
    python -m simulation.benchmarks.batching_bound                           # ResNet-18-GN on CUDA when torch sees one

Three timings of a gradient (forward and backward, no update) for K clients with minibatches of B samples each, on
the same random CIFAR-shaped inputs, after a warm-up:
- one at a time: K gradients of batch B on one model (`FlatModel.loss_and_grad`, what a client's step computes);
- one model, K·B samples: one gradient of batch K·B. Stacking K clients cannot do less arithmetic than this, and
  no layout of K different weight sets is denser than one weight set over all the samples, so its ratio to one at a
  time, `batching_bound`, is about the least a batched step can cost relative to one at a time on this device;
- stacked: the batched path's gradient (`fedsuite.batched.model.StackedModel`, `torch.func.vmap` over K rows of
  weights, each client's own batch): `stacked_ratio` to one at a time.
Each is the median of --repeats timings. Prints the three in ms, `grad_max_abs_diff` (each client's gradient against
its row of the stacked one), `stacked_ratio <x>`, and last `batching_bound <x>`.

Between them, on CUDA, whole steps (gradient and SGD move) measured in the same process
(simulation/benchmarks/step_variants.py): the stacked step recorded as one CUDA graph, and against it the variants of
--variants: `compile` (torch.compile of the stacked step, then recorded), `channels-last` (NHWC inputs) and `streams`
(per-client graphs on --streams CUDA streams), each in ms per step over --steps steps. A variant that fails prints
one line why and the others still run. On a CPU they are skipped unless --variants names them (then eagerly).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fedsuite.batched.model import StackedModel
from fedsuite.models.networks import FlatModel, build_model
from simulation.benchmarks import step_variants
from simulation.benchmarks.step_bounds import Workload

INPUT_SHAPE, CLASSES = (3, 32, 32), 10


def timed(work, device: torch.device, repeats: int) -> float:
    """The median seconds of `work()` over `repeats` calls after one warm-up call."""
    work()
    seconds = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def measure(model_name: str, device: torch.device, clients: int, batch: int, repeats: int) -> dict:
    torch.manual_seed(0)
    model = FlatModel(build_model(model_name, INPUT_SHAPE, CLASSES, "classification"), device)
    loss_fn = torch.nn.CrossEntropyLoss()
    inputs = torch.randn(clients, batch, *INPUT_SHAPE, device=device)
    targets = torch.randint(0, CLASSES, (clients, batch), device=device)
    stacked = StackedModel(model, clients)
    stacked.x.copy_(model.x.expand(clients, -1))

    def one_at_a_time():
        for k in range(clients):
            model.loss_and_grad(loss_fn, inputs[k], targets[k])

    flat_inputs, flat_targets = inputs.reshape(clients * batch, *INPUT_SHAPE), targets.reshape(-1)
    seconds = {
        "one_at_a_time_s": timed(one_at_a_time, device, repeats),
        "one_model_all_samples_s": timed(
            lambda: model.loss_and_grad(loss_fn, flat_inputs, flat_targets), device, repeats
        ),  # fmt: skip
        "stacked_s": timed(lambda: stacked.loss_and_grad(loss_fn, inputs, targets), device, repeats),
    }
    apart = 0.0  # the paths computed the same gradients: each client's against its row of the stacked one
    for k in range(clients):
        model.loss_and_grad(loss_fn, inputs[k], targets[k])
        apart = max(apart, float((stacked.grad[k] - model.grad).abs().max()))
    return {**seconds, "grad_max_abs_diff": apart, "stacked_ratio": seconds["stacked_s"] / seconds["one_at_a_time_s"],
            "batching_bound": seconds["one_model_all_samples_s"] / seconds["one_at_a_time_s"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation.benchmarks.batching_bound", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default="resnet18-gn", help="a built-in model name or package.module:factory")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--clients", type=int, default=10, help="K, clients batched together")
    parser.add_argument("--batch", type=int, default=50, help="B, each client's minibatch")
    parser.add_argument("--repeats", type=int, default=10, help="timings per figure (the median is printed)")
    parser.add_argument("--variants", default="auto",
                        help=f"comma-separated of {', '.join(step_variants.VARIANTS)}, or none; auto: all on CUDA, "
                        "none on a CPU")  # fmt: skip
    parser.add_argument("--steps", type=int, default=20, help="steps per timing of a whole step (the variants)")
    parser.add_argument("--streams", type=int, default=4, help="CUDA streams of the streams variant")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (compile variant)")
    parser.add_argument("--compile-mode", default="default", help="torch.compile's mode (compile variant)")
    args = parser.parse_args(argv)
    for flag in ("clients", "batch", "repeats", "steps", "streams"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1")
    variants = chosen_variants(parser, args.variants, args.device)
    device = torch.device(args.device)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device {card}, torch {torch.__version__}; model {args.model}, {args.clients} clients × batch {args.batch}, "
          f"gradient only, median of {args.repeats}", flush=True)  # fmt: skip
    result = measure(args.model, device, args.clients, args.batch, args.repeats)
    print(f"one at a time ({args.clients} × batch {args.batch}): {result['one_at_a_time_s'] * 1e3:.1f} ms")
    print(f"one model, batch {args.clients * args.batch}: {result['one_model_all_samples_s'] * 1e3:.1f} ms")
    print(f"stacked (vmap over {args.clients} clients): {result['stacked_s'] * 1e3:.1f} ms", flush=True)
    whole_steps(args, device, variants)
    print(f"grad_max_abs_diff {result['grad_max_abs_diff']:.3g}")
    print(f"stacked_ratio {result['stacked_ratio']:.3f}")
    print(f"batching_bound {result['batching_bound']:.3f}")
    return 0


def chosen_variants(parser: argparse.ArgumentParser, text: str, device: str) -> list[str] | None:
    """The variants to run, [] for none, None for 'auto' on a CPU (skipped, and said so); refused in one line when
    a name is not one of them."""
    if text == "auto":
        return list(step_variants.VARIANTS) if torch.device(device).type == "cuda" else None
    names = [] if text == "none" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in step_variants.VARIANTS]
    if unknown:
        parser.error(f"--variants {text!r}: allowed values are {', '.join(step_variants.VARIANTS)}, auto or none")
    return names


def whole_steps(args, device: torch.device, variants: list[str] | None) -> None:
    """The graphed stacked step and the variants, one line each (step_variants.line), each printed when timed."""
    if variants is None:
        print("variants: skipped on a CPU (they measure CUDA graphs, streams and compiled kernels; --variants names "
              "some to run them eagerly)", flush=True)  # fmt: skip
        return
    work = Workload(args.model, args.clients, args.batch, args.steps, device)
    base = None
    timings = step_variants.measure(work, variants, args.repeats, args.streams, args.compile_backend, args.compile_mode)
    for name, result in timings:
        base = result.get("seconds") if name == "graphed" else base
        print(step_variants.line(work, name, result, base, args.compile_backend, args.compile_mode), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
