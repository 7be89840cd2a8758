"""Where a DP-SGD step of a stacked group spends its time (docs/performance.md#dp-sgd-under-batching).

A batched DP-SGD round of the reference workload (ResNet-18-GN, 10 clients × 50 steps of batch 50) took 20.3 s on
an H200, 27.8 times the plain batched round, with its steps run one by one (fedsuite/batched/private.py). This
benchmark times one private step's parts on the workload, in the same process, each in ms per step (the median of
--repeats, after one untimed run):

- `plain`: the stacked gradient of the plain step (StackedModel.loss_and_grad), the reference;
- `private`: the whole private gradient as the suite takes it (StackedPrivateModel.loss_and_grad) with
  dp-sgd-per-record='vmap', in the pieces of records its memory cap gives, and again with every record of a step in
  one piece;
- its parts on one piece of every record: the per-record gradients (a vmap over clients of a vmap over records),
  their clipping and per-client sums, and the clients' noise draws;
- `ghost`: the whole private gradient with dp-sgd-per-record='ghost' (ghost clipping over the stacked group,
  fedsuite/batched/ghost.py).

    python -m simulation.benchmarks.private_step                      # the reference workload on cuda
    python -m simulation.benchmarks.private_step --model cnn --clients 2 --batch 4 --device cpu   # a check

Each line ends with its ratio to `plain`; `pieces` says how many pieces of records one step took. The last lines are
`private_over_plain` (vmap, the suite's pieces) and `ghost_over_plain`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from fedsuite.batched import private as stacked_private
from fedsuite.batched.model import StackedModel
from fedsuite.models.networks import loss_function
from fedsuite.privacy.dp_sgd import DpSgd
from fedsuite.server.sampling import Sampler
from simulation.benchmarks import step_bounds
from simulation.benchmarks.step_bounds import Workload

NOISE, CLIP = 1.0, 1.0  # σ_s and C_s of the device check's DP-SGD row
ALL_RECORDS = 1 << 62  # a piece cap no step reaches: every record of a step in one piece


def private_oracle(model: StackedModel, batch: int, piece_bytes: int,
                   per_record: str = "vmap") -> stacked_private.StackedPrivateModel:  # fmt: skip
    """A private oracle over `model` with a throwaway DpSgd per row (seeded noise streams), `piece_bytes` and the
    per-record method `per_record`."""
    private = DpSgd(NOISE, CLIP, batch, 10 * batch, 1e-5, Sampler(1, "fixed", 1), 0, 1, noise_source="seeded",
                    per_record=per_record)  # fmt: skip
    oracle = stacked_private.probe_oracle(model, private)
    oracle.piece_bytes = piece_bytes
    return oracle


def timed(run: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of `repeats` calls of `run` after one untimed call, each waited for on the device."""
    seconds = []
    for repeat in range(repeats + 1):
        step_bounds.sync(device)
        start = time.perf_counter()
        run()
        step_bounds.sync(device)
        if repeat:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def measure(work: Workload, repeats: int) -> dict[str, float | int]:
    """Seconds of each part of one private step (module docstring), and the pieces of each private run."""
    flat = step_bounds.flat_model(work)
    model = StackedModel(flat, work.clients)
    model.x.copy_(flat.x.expand(work.clients, -1))  # every client at the model's seeded initial weights
    inputs, targets = step_bounds.minibatches(work, dense=False)[0]
    loss_fn = loss_function("classification")  # the suite's own: ghost clipping takes it
    capped = private_oracle(model, work.batch, stacked_private.RECORD_GRADIENT_BYTES)
    whole = private_oracle(model, work.batch, ALL_RECORDS)
    ghost = private_oracle(model, work.batch, stacked_private.RECORD_GRADIENT_BYTES, "ghost")
    gradient = whole._gradient(loss_fn)
    found: dict[str, float | int] = {"plain": timed(lambda: model.loss_and_grad(loss_fn, inputs, targets), work.device,
                                                    repeats)}  # fmt: skip
    for name, oracle in (("private", capped), ("private_one_piece", whole), ("ghost", ghost)):
        found[name] = timed(lambda o=oracle: (o.new_step(), o.loss_and_grad(loss_fn, inputs, targets)), work.device,
                            repeats)  # fmt: skip
        found[f"{name}_pieces"] = -(-work.batch // oracle.records_per_piece())
    grads, _ = gradient(model.parameters, inputs, targets)
    found["per_record_gradients"] = timed(lambda: gradient(model.parameters, inputs, targets), work.device, repeats)
    found["clip_and_sum"] = timed(lambda: stacked_private._add_clipped(model, grads, CLIP, first=True), work.device,
                                  repeats)  # fmt: skip
    found["noise"] = timed(whole._noise_draws, work.device, repeats)
    return found


def lines(found: dict[str, float | int]) -> list[str]:
    """One printed line per part: ms per step and the ratio to the plain stacked gradient."""
    plain = found["plain"]
    labels = {
        "plain": "plain stacked gradient",
        "private": "private gradient (the suite's pieces)",
        "private_one_piece": "private gradient, every record in one piece",
        "per_record_gradients": "  its per-record gradients (one piece)",
        "clip_and_sum": "  their clipping and per-client sums",
        "noise": "  the clients' noise draws",
        "ghost": "private gradient by ghost clipping",
    }
    out = []
    for name, label in labels.items():
        pieces = f", {found[name + '_pieces']} piece(s) a step" if name + "_pieces" in found else ""
        out.append(f"{label}: {found[name] * 1e3:.2f} ms ({found[name] / plain:.2f}× plain{pieces})")
    out.append(f"private_over_plain {found['private'] / plain:.3f}")
    out.append(f"ghost_over_plain {found['ghost'] / plain:.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18-gn")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    for flag in ("clients", "batch", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1")
    device = torch.device(args.device)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device {card}, torch {torch.__version__}; model {args.model}, {args.clients} clients × batch "
          f"{args.batch}, one DP-SGD step (σ={NOISE}, C={CLIP}), median of {args.repeats}", flush=True)  # fmt: skip
    work = Workload(args.model, args.clients, args.batch, 1, device)
    for line in lines(measure(work, args.repeats)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
