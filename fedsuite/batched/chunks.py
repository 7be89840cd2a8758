"""How many clients one stacked computation trains (run-config key `batch-chunk`,
docs/running/batched.md#large-cohorts-chunks).

A group of clients that can train together (fedsuite/batched/grouping.py) trains in chunks of at most `most`
clients, split evenly (`even_chunks`: 40 clients with room for 15 → 14, 13, 13), so that every chunk costs the same.
`most` is the run's batch-chunk when it is set; with batch-chunk=0 it is

- on a CPU, the whole group, unless the clients' model-sized vectors alone (`vector_bytes`: their rows of x, the
  gradient, x0 and every rule tensor, and their rounds of minibatches; activations not counted) would take more
  than HOST_SHARE of the host memory available (Linux's MemAvailable); then as many as fit in that share;
- on a CUDA device, what the device's memory holds, measured. `MemoryPlan` runs one stacked step of one and of two
  copies of the group's first client (`one_step`: its rule's tensors stacked as copies, so the client itself is
  untouched), once per run and kind of group, and reads the allocator's counts (torch.cuda.memory_allocated,
  torch.cuda.max_memory_allocated after torch.cuda.reset_peak_memory_stats). What the second client adds is one
  client's cost, or half the two-client step's when that is more (a library workspace that is smaller for two clients
  than for one would otherwise hide part of a client's cost; `footprint`):

    held     bytes still allocated after the step: the client's rows of x, of the gradient and of x0, its rows of
             every stacked rule tensor (SCAFFOLD's c − c_i, FedDyn's duals, the Adam moments, a block table …) and
             of the buffers stages make at their first step (SAM's saved iterate and gradient);
    passing  bytes allocated only while the step runs: its activations, its vmapped per-parameter gradients before
             they are gathered into the (C, d) gradient, the step's temporaries;

  and what the one-client step costs beyond that is `fixed` (library workspaces). A client then costs held +
  passing (twice passing when the step is recorded as a CUDA graph: the recording keeps a memory pool of its own
  for the step's temporaries, next to the one the eager first step used) + its minibatches (`draws_bytes`: in
  iteration mode the loop draws a client's whole round at once, fedsuite/batched/draws.py). The
  free bytes are the device's free memory (torch.cuda.mem_get_info) plus what the allocator holds cached but unused
  (reserved − allocated), measured before each chunk for the clients left; `most_clients` keeps SAFETY of them,
  less `fixed`, and divides by one client's cost. A CUDA plan, once made for a kind of group and a number of
  clients, is kept for the run: every round then trains the same chunks and replays the steps kept for them
  (fedsuite/batched/kept_steps.py), whose tensors and recordings later readings of the free memory would exclude.

The probe resets the device's peak-memory statistics, once per run and kind of group, before the group trains.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

from fedsuite.batched.graph import not_replayable
from fedsuite.batched.model import StackedModel
from fedsuite.batched.private import probe_oracle
from fedsuite.batched.stacking import RULE_FIELDS, SEQUENCES, stack_rules
from fedsuite.local.loop import LocalData, LocalSettings, StepContext, UpdateRule, move
from fedsuite.models.networks import FlatModel

SAFETY = 0.8  # the share of the free device memory a chunk may take: room for fragmentation and the estimate's error
HOST_SHARE = 0.5  # on a CPU, the share of the available host memory a chunk's vectors may take
GIB = 2**30


def even_chunks(clients: int, most: int) -> list[int]:
    """`clients` split into the fewest chunks of at most `most` (≥ 1), their sizes as equal as they can be, the
    larger first: (40, 15) → [14, 13, 13]; (7, 3) → [3, 2, 2]; (7, 10) → [7]."""
    if clients <= 0:
        return []
    count = -(-clients // max(1, most))
    size, larger = divmod(clients, count)
    return [size + 1] * larger + [size] * (count - larger)


def most_clients(free: int, per_client: int, fixed: int, fraction: float = SAFETY) -> int:
    """How many clients of `per_client` bytes each, after `fixed` bytes, fit in `fraction` of `free` bytes; at
    least 1 (one client trains whatever the estimate says: the group's fallback handles a failure)."""
    room = fraction * free - fixed
    if per_client <= 0:
        return 1 << 30
    return max(1, int(room // per_client))


@dataclass(frozen=True)
class Footprint:
    """What one more client of a stacked step costs on the device (module docstring), in bytes."""

    held: int
    passing: int
    fixed: int

    def client_bytes(self, recorded: bool, draws: int) -> int:
        """One client's cost in a chunk: `recorded`: the step is recorded as a CUDA graph; `draws`: its round of
        minibatches, bytes."""
        return self.held + self.passing * (2 if recorded else 1) + draws


def footprint(one: tuple[int, int], two: tuple[int, int]) -> Footprint:
    """The footprint from the probe's (held, peak) bytes of one stacked step of one client and of two: per client,
    what the second client adds or half the two clients' bytes, whichever is more; `fixed`, what the one-client step
    costs beyond that."""
    held = max(two[0] - one[0], two[0] // 2, 0)
    passing = max((two[1] - two[0]) - (one[1] - one[0]), (two[1] - two[0]) // 2, 0)
    return Footprint(held, passing, max(0, one[1] - held - passing))


@dataclass
class GroupSample:
    """A group's first client, as the probe steps it: the shared model, its x0, data, loss and rule, the round's
    settings, the batch plan's K_i and largest minibatch (fedsuite.batched.grouping.plan_shape), and its DP-SGD
    (`private`: a fedsuite.privacy.dp_sgd.DpSgd, whose per-record gradients the probe's step then takes; None
    without dp-sgd)."""

    model: FlatModel
    x0: torch.Tensor
    data: LocalData
    loss_fn: object
    rule: UpdateRule
    settings: LocalSettings
    steps: int
    batch: int
    private: Any = None

    def minibatch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The client's first `batch` samples: one step's inputs and targets, of the shapes its draws have."""
        return self.data.inputs[: self.batch], self.data.targets[: self.batch]

    def draws_bytes(self) -> int:
        """A client's minibatches while its group trains, bytes: in iteration mode with the default batch source the
        loop draws the whole round at once, K_i minibatches (fedsuite/batched/draws.py), else one a step; either
        twice, as the client's own draws and their rows of the group's stacked copy are both held."""
        inputs, targets = self.minibatch()
        at_once = self.settings.steps > 0 and self.rule.batches is None
        return 2 * (self.steps if at_once else 1) * (inputs.nbytes + targets.nbytes)


def one_step(sample: GroupSample, clients: int, inputs: torch.Tensor, targets: torch.Tensor) -> tuple:
    """One stacked step (the loop's: fedsuite/batched/loop.py) of `clients` copies of the sample client on the
    stacked (C, B, …) `inputs`; returns what the loop keeps for the round (iterate, gradient, x0, stacked rule) so
    that the caller can count it. The sample's own rule, x0 and DP-SGD ledger are read, never written (a private
    step's oracle is fedsuite.batched.private.probe_oracle: throwaway copies of the client's DpSgd)."""
    stacked = stack_rules([sample.rule] * clients)  # copies of the rule's tensors
    model = StackedModel(sample.model, clients)
    x0 = torch.stack([sample.x0] * clients)
    model.x.copy_(x0)
    ctx = StepContext(x=model.x, x0=x0, lr=sample.settings.lr)
    ctx.block = None if sample.rule.batches is None else [0] * clients
    oracle = model if sample.private is None else probe_oracle(model, sample.private)
    stacked.rule.point(oracle, sample.loss_fn, inputs, targets)
    move(model.grad, ctx, stacked.rule, batch=targets.shape[1], settings=sample.settings)
    return model, x0, stacked, ctx


def probe(sample: GroupSample) -> Footprint:
    """The sample's footprint measured on its CUDA device (module docstring)."""
    device = sample.model.x.device
    measured = []
    for clients in (1, 2):
        inputs, targets = (torch.stack([t] * clients) for t in sample.minibatch())
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        kept = one_step(sample, clients, inputs, targets)
        measured.append((torch.cuda.memory_allocated(device) - base, torch.cuda.max_memory_allocated(device) - base))
        del kept, inputs, targets
    return footprint(*measured)


def free_bytes(device: torch.device) -> int:
    """The device's free memory and what its allocator holds cached but unused, bytes."""
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


@dataclass(frozen=True)
class Plan:
    """A group's chunk sizes and why, in words with the plan's numbers."""

    sizes: list[int]
    why: str


class MemoryPlan:
    """Chunks for a run's groups (module docstring); one per run: the probe runs once per kind of group."""

    def __init__(self):
        self._footprints: dict[Hashable, Footprint | str] = {}  # kind → its footprint, or why the probe failed
        self._plans: dict[Hashable, Plan] = {}  # (kind, clients, cuda_graphs) → the CUDA plan made for it

    def plan(self, clients: int, chunk: int, sample: GroupSample, kind: Hashable, cuda_graphs: bool) -> Plan:
        """The chunk sizes of a group of `clients` like `sample` (`kind`: what its probe is cached by): at most
        `chunk` (batch-chunk) when it is set; else measured on a CUDA device, on a CPU as the host's memory allows."""
        if chunk > 0:
            return Plan(even_chunks(clients, chunk), f"batch-chunk={chunk}")
        if sample.model.x.device.type != "cuda":
            return on_host(clients, sample)
        if kind not in self._footprints:
            try:
                self._footprints[kind] = probe(sample)
            except Exception as err:  # the group's own training then meets the problem, and falls back as usual
                self._footprints[kind] = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        found = self._footprints[kind]
        if isinstance(found, str):
            return Plan([clients], f"the memory probe raised {found}: the whole group")
        made = (kind, clients, cuda_graphs)  # kept for the run: every round then trains the same chunks and replays
        if made not in self._plans:  # the steps kept for them (fedsuite/batched/kept_steps.py), whose tensors and
            self._plans[made] = on_cuda(clients, sample, found, cuda_graphs)  # recordings the free memory excludes
        return self._plans[made]


def on_cuda(clients: int, sample: GroupSample, found: Footprint, cuda_graphs: bool) -> Plan:
    """The chunks of a group of `clients` like `sample` whose footprint is `found`, on its CUDA device now."""
    device = sample.model.x.device
    steps = sample.settings.steps  # 0 in epoch mode, which is never recorded (fedsuite/batched/loop.py)
    replayable = not_replayable(sample.rule, device, steps) is None
    recorded = cuda_graphs and steps > 0 and sample.private is None and replayable  # DP-SGD steps are not recorded
    per_client = found.client_bytes(recorded, sample.draws_bytes())
    free = free_bytes(device)
    most = most_clients(free, per_client, found.fixed)
    why = (
        f"{free / GIB:.2f} GiB free on {device} × {SAFETY}, less {found.fixed / GIB:.2f} GiB fixed, holds {most} "
        f"clients of {per_client / GIB:.3f} GiB each ({found.held / GIB:.3f} held, {found.passing / GIB:.3f} "
        f"passing{' ×2 for the recorded step' if recorded else ''}, {sample.draws_bytes() / GIB:.3f} of drawn "
        "minibatches; measured by one stacked step of 1 and 2 clients)"
    )
    return Plan(even_chunks(clients, most), why)


def on_host(clients: int, sample: GroupSample) -> Plan:
    """A CPU group's chunks: the whole group, unless its clients' model-sized vectors alone (`vector_bytes`) would
    take more than HOST_SHARE of the host memory available now; then as many as fit in that share."""
    per_client, available = vector_bytes(sample), available_host_bytes()
    if available is None or clients * per_client <= HOST_SHARE * available:
        return Plan([clients], "not a CUDA device: the whole group")
    most = most_clients(available, per_client, 0, HOST_SHARE)
    why = (
        f"not a CUDA device: {clients} clients' vectors of {per_client / GIB:.3f} GiB each would take more than "
        f"{HOST_SHARE} of the {available / GIB:.2f} GiB of host memory available, which holds {most}"
    )
    return Plan(even_chunks(clients, most), why)


def vector_bytes(sample: GroupSample) -> int:
    """What one client of a stacked computation holds in vectors, bytes: its rows of x, of the gradient and of x0,
    of every tensor its rule's stages hold (`rule_bytes`), and its round of minibatches; activations not counted."""
    return 3 * sample.x0.nbytes + rule_bytes(sample.rule) + sample.draws_bytes()


def rule_bytes(rule: UpdateRule) -> int:
    """Bytes of the tensors a rule's stages hold (what stacking copies into the group's rows), each stage once."""
    total, seen = 0, set()
    for name in RULE_FIELDS:
        value = getattr(rule, name)
        for stage in tuple(value) if name in SEQUENCES else (value,):
            owner = getattr(stage, "__self__", stage)  # a bound method's object (Prox.centre_part …)
            if id(owner) in seen:
                continue
            seen.add(id(owner))
            for held in getattr(owner, "__dict__", {}).values():
                for tensor in held if isinstance(held, (list, tuple)) else (held,):
                    total += tensor.nbytes if isinstance(tensor, torch.Tensor) else 0
    return total


def available_host_bytes() -> int | None:
    """The host memory available now (Linux's MemAvailable), bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
