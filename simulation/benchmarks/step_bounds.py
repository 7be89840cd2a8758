"""What a round's training costs at the card's bound: the suite's own local step, alone, recorded as one CUDA graph.

Two bounds for `steps` local steps of `clients` clients with minibatches of `batch` CIFAR-shaped samples (random
inputs made on the device beforehand, no augmentation: the suite draws and augments a round's minibatches before its
first step, docs/running/batched.md):

- stacked (`bound`): the batched path's step as `fedsuite.batched.loop.train_stacked` takes it: the `StackedModel`'s
  vmapped gradient at the rule's point, then `fedsuite.local.loop.move` on the (C, d) rows (clipping at 10, weight
  decay 1e-3, SGD at lr 0.01, as simulation/benchmarks/gpu_round.py's workload), recorded by
  `fedsuite.batched.graph.RecordedStep` and replayed, each replay after copying its minibatch into the recording's
  buffers and adding its losses to a running sum, as the suite's loop does;
- one model (`dense`): ONE model on a minibatch of C·B samples, the same step on its (d,) vector, recorded and
  replayed the same way. No layout of C weight sets is denser than one weight set over all the samples.

Rule `sgd` takes one gradient per step; `sam` two (SharpnessAware, ρ = 0.1), the cost of the two-gradient
algorithms. On a CPU the same steps run eagerly; where a recording fails they run eagerly too. Every result says how
it ran (`how`), so an eager figure is never read as a graphed one.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fedsuite.batched.graph import RecordedStep
from fedsuite.batched.model import StackedModel
from fedsuite.local.loop import LocalSettings, SharpnessAware, StepContext, UpdateRule, move
from fedsuite.models.networks import FlatModel, build_model

INPUT_SHAPE, CLASSES = (3, 32, 32), 10
LR, WEIGHT_DECAY, CLIP_NORM = 0.01, 1e-3, 10.0  # as gpu_round.reference_config
SAM_RHO = 0.1  # as simulation/benchmarks/local_loop.py
RULES = ("sgd", "sam")
POOL = 4  # distinct minibatches cycled through (the copies into the recording's buffers are what is timed)

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Workload:
    """One bound's shape: the model, C clients × B samples, K steps, on `device`, with `autocast` and `rule`."""

    model: str
    clients: int
    batch: int
    steps: int
    device: torch.device
    autocast: str = "none"
    rule: str = "sgd"


def update_rule(name: str) -> UpdateRule:
    if name not in RULES:
        raise ValueError(f"rule {name!r}: allowed values are {', '.join(RULES)}")
    return UpdateRule(point=SharpnessAware(SAM_RHO)) if name == "sam" else UpdateRule()


def local_settings(work: Workload) -> LocalSettings:
    return LocalSettings(lr=LR, steps=work.steps, epochs=1, batch_size=work.batch, weight_decay=WEIGHT_DECAY,
                         clip_norm=CLIP_NORM)  # fmt: skip


def flat_model(work: Workload) -> FlatModel:
    """The model with its seeded initial weights, on the device."""
    torch.manual_seed(0)
    module = build_model(work.model, INPUT_SHAPE, CLASSES, "classification")
    return FlatModel(module, work.device, autocast=work.autocast)


def minibatches(work: Workload, dense: bool, channels_last: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """POOL random minibatches on the device: (C, B, 3, 32, 32) for the stacked step, (C·B, 3, 32, 32) for one model;
    `channels_last`: each sample's pixels in NHWC memory order (the same values)."""
    generator = torch.Generator(work.device).manual_seed(1)
    lead = (work.clients * work.batch,) if dense else (work.clients, work.batch)
    pool = []
    for _ in range(POOL):
        c, h, w = INPUT_SHAPE
        if channels_last:
            inputs = torch.randn(*lead, h, w, c, device=work.device, generator=generator).movedim(-1, -3)
        else:
            inputs = torch.randn(*lead, c, h, w, device=work.device, generator=generator)
        targets = torch.randint(0, CLASSES, lead, device=work.device, generator=generator)
        pool.append((inputs, targets))
    return pool


def stacked_step(work: Workload, model: FlatModel) -> tuple[Step, StackedModel]:
    """train_stacked's step for `work.clients` copies of `model` (every row starts at its x)."""
    stacked = StackedModel(model, work.clients)
    stacked.x.copy_(model.x.expand(work.clients, -1))
    return _loop_step(work, stacked, batch_axis=1), stacked


def dense_step(work: Workload, model: FlatModel) -> Step:
    """The same step for ONE model on its (d,) vector (the minibatch holds every client's samples)."""
    return _loop_step(work, model, batch_axis=0)


def _loop_step(work: Workload, oracle, batch_axis: int) -> Step:
    """The loop's step (the rule's gradient point, then `move`) on `oracle`'s x, from where x is now; the minibatch
    size is the targets' size along `batch_axis`."""
    ctx = StepContext(x=oracle.x, x0=oracle.x.clone(), lr=LR)
    rule, settings, loss_fn = update_rule(work.rule), local_settings(work), torch.nn.CrossEntropyLoss()

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = rule.point(oracle, loss_fn, inputs, targets)
        move(oracle.grad, ctx, rule, batch=targets.shape[batch_axis], settings=settings)
        return loss

    return step


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def replayer(step: Step, pool, device: torch.device, graphed: bool = True) -> tuple[Callable, str]:
    """`run(k)`: step k on minibatch k mod POOL, by a CUDA graph where `graphed` and the device allows (recorded
    here, before any timing), else eagerly; and how it runs, in words."""
    if device.type != "cuda" or not graphed:
        step(*pool[0])  # warm-up
        why = "no CUDA graphs on a CPU" if device.type != "cuda" else "not recorded, as asked"
        return (lambda k: step(*pool[k % POOL])), f"run eagerly: {why}"
    recorded = RecordedStep(step, device)
    recorded.run(0, *pool[0])  # as the suite: step 0 as usual, on a side stream
    recorded.run(1, *pool[1])  # recorded, then replayed
    if recorded.failed is not None:
        return (lambda k: step(*pool[k % POOL])), f"run eagerly: the recording failed ({recorded.failed})"
    return (lambda k: recorded.run(k + 2, *pool[k % POOL])), "one CUDA graph replayed"


def one_round(run: Callable, work: Workload) -> float:
    """The seconds of one round of `work.steps` steps, each step's losses summed on the device as the suite's loop
    sums them, the device waited for before and after."""
    loss_sum = torch.zeros(work.clients, device=work.device)
    sync(work.device)
    start = time.perf_counter()
    for k in range(work.steps):
        loss_sum += run(k)
    sync(work.device)
    return time.perf_counter() - start


def time_round(run: Callable, work: Workload, repeats: int) -> float:
    """The median seconds of `repeats` rounds (`one_round`) after one untimed round."""
    one_round(run, work)
    return statistics.median(one_round(run, work) for _ in range(repeats))


def one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def measure(work: Workload, dense: bool, repeats: int = 3, graphed: bool = True) -> dict:
    """{"seconds", "how"} of one bound (`dense`: one model on C·B samples, else the stacked step), or {"error"}
    in one line where it could not run (out of memory, a model the stacked step does not take)."""
    try:
        return _timed(work, dense, repeats, graphed)
    except Exception as err:  # a bound that cannot run is said in one line; the benchmark goes on
        return {"error": one_line(err)}
    finally:
        release(work.device)


def _timed(work: Workload, dense: bool, repeats: int, graphed: bool) -> dict:
    model = flat_model(work)
    step = dense_step(work, model) if dense else stacked_step(work, model)[0]
    run, how = replayer(step, minibatches(work, dense), work.device, graphed)
    return {"seconds": time_round(run, work, repeats), "how": how}


def release(device: torch.device) -> None:
    """The device memory of a finished timing (its models, minibatches and recording, unreferenced once its
    function has returned) handed back, so the next timing and the suite's peak memory start from nothing."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def describe(work: Workload, dense: bool, result: dict) -> str:
    """What a bound measured, in words, for its printed line."""
    what = (f"one model on {work.clients * work.batch} samples" if dense
            else f"stacked vmap step of {work.clients} clients × batch {work.batch}")  # fmt: skip
    bf16 = ", bf16 autocast" if work.autocast == "bf16" else ""
    if "error" in result:
        return f"({work.rule}: {what}{bf16}: could not run: {result['error']})"
    return f"({work.rule}: {what}{bf16}, {work.steps} steps, {result['how']})"


def printed(work: Workload, repeats: int) -> dict:
    """Both bounds of `work` ({"bound": …, "dense": …}, as `measure`), each printed as `bound_s` / `dense_s`
    (`bound_sam_s` / `dense_sam_s` for the SAM rule; `n/a` where it could not run) with what it measured."""
    found = {}
    for name, dense in (("bound", False), ("dense", True)):
        found[name] = measure(work, dense, repeats)
        label = f"{name}_s" if work.rule == "sgd" else f"{name}_{work.rule}_s"
        value = f"{found[name]['seconds']:.3f}" if "seconds" in found[name] else "n/a"
        print(f"{label} {value}  {describe(work, dense, found[name])}", flush=True)
    return found


def ratios(algorithm: str, round_s: float | None, found: dict | None, rule: str) -> dict:
    """`bound_ratio` and `dense_ratio`: a batched round over its rule's two bounds (None where one could not run),
    printed in one line; {} without a round or bounds."""
    if round_s is None or not found:
        return {}
    out = {f"{name}_ratio": None if "seconds" not in found[name] else round_s / found[name]["seconds"]
           for name in ("bound", "dense")}  # fmt: skip
    shown = "  ".join(f"{key} {'n/a' if value is None else f'{value:.3f}'}" for key, value in out.items())
    print(f"{algorithm:<9} {shown}  (batched round ÷ the {rule} bounds)", flush=True)
    return out
