"""Other ways to run the batched step, each timed against the stacked step recorded as one CUDA graph (the bound of
simulation/benchmarks/step_bounds.py), in the same process, for simulation/benchmarks/batching_bound.py:

- `compile`: the same stacked step through `torch.compile`, then recorded and replayed as the suite records its step;
- `channels-last`: the stacked step recorded and replayed on inputs whose pixels lie in NHWC memory order;
- `streams`: no stacking: each client's own one-model step recorded as its own CUDA graph, the clients' replays
  spread over several CUDA streams so that they may overlap on the card.

Every variant is guarded: one that fails (a compiler that cannot trace the step, memory) gives its one-line reason
and the others still run; each line is printed as soon as its timing is done, and a variant whose first, untimed
round takes longer than PATIENCE_S is timed by that round alone and says so (on an H200 the channels-last and
streams variants once ran past 230 s without a line, and which of them was slow stayed unknown). On a CPU there
are no graphs or streams: a variant asked for there runs the same steps eagerly (one after the other for
`streams`), which checks that it runs, not what it saves.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from simulation.benchmarks import step_bounds
from simulation.benchmarks.step_bounds import Workload

VARIANTS = ("compile", "channels-last", "streams")
PATIENCE_S = 15.0  # a variant whose untimed first round takes longer is not timed again (module docstring)


def timed(run: Callable, work: Workload, repeats: int) -> tuple[float, str]:
    """step_bounds.time_round's median of `repeats` rounds after an untimed one, and a note: when the untimed round
    passes PATIENCE_S, its own seconds instead, noted as such."""
    first = step_bounds.one_round(run, work)
    if first > PATIENCE_S:
        return first, f"; its first round took {first:.1f} s, so it was not timed again"
    return statistics.median(step_bounds.one_round(run, work) for _ in range(repeats)), ""


def graphed_stacked(work: Workload, repeats: int, compiled: Callable | None = None, channels_last: bool = False):
    """Seconds and how of `work.steps` stacked steps: recorded where the device allows; the step passed through
    `compiled` (torch.compile with its settings) when given; inputs in NHWC order when `channels_last`."""
    model = step_bounds.flat_model(work)
    step = step_bounds.stacked_step(work, model)[0]
    if compiled is not None:
        step = compiled(step)
    run, how = step_bounds.replayer(step, step_bounds.minibatches(work, False, channels_last), work.device)
    seconds, note = timed(run, work, repeats)
    return seconds, how + note


def per_client_streams(work: Workload, repeats: int, streams: int) -> tuple[float, str]:
    """Seconds and how of `work.steps` steps of every client, each client its own model and recorded step, client c
    replayed on stream c mod `streams` (on a CPU: eagerly, one after the other)."""
    one = replace(work, clients=1)
    cuda = work.device.type == "cuda"
    lanes = [torch.cuda.Stream(work.device) for _ in range(streams)] if cuda else [None]
    runs, hows = [], set()
    for client in range(work.clients):
        model = step_bounds.flat_model(one)
        step = step_bounds.dense_step(one, model)  # one model on its own batch of B
        pool = step_bounds.minibatches(one, dense=True)
        run, how = step_bounds.replayer(step, pool, work.device)
        runs.append((lanes[client % len(lanes)], run))
        hows.add(how)
    losses = [torch.zeros((), device=work.device) for _ in runs]  # each client's, summed on its own lane
    nothing = torch.zeros((), device=work.device)
    if cuda:
        for lane in lanes:  # the models and pools were made on the default stream
            lane.wait_stream(torch.cuda.current_stream(work.device))

    def every_client(k: int) -> torch.Tensor:
        """Step k of every client; time_round's synchronisation waits for every lane."""
        for (lane, run), loss in zip(runs, losses, strict=True):
            if lane is None:
                loss += run(k)
                continue
            with torch.cuda.stream(lane):
                loss += run(k)
        return nothing

    seconds, note = timed(every_client, work, repeats)
    where = f"spread over {len(lanes)} CUDA streams" if cuda else "one after the other on a CPU"
    return seconds, f"{work.clients} per-client steps {where}, each {' / '.join(sorted(hows))}{note}"


def compiler(backend: str, mode: str) -> Callable:
    """torch.compile with these settings (mode 'default' passes none)."""
    return lambda fn: torch.compile(fn, backend=backend, **({} if mode == "default" else {"mode": mode}))


def measure(work: Workload, names: list[str], repeats: int, streams: int, backend: str, mode: str) -> Iterator:
    """The graphed stacked step, then each variant of `names`, each given as soon as it is timed: (name,
    {"seconds", "how"} or {"error"})."""
    runs = {
        "graphed": lambda: graphed_stacked(work, repeats),
        "compile": lambda: graphed_stacked(work, repeats, compiled=compiler(backend, mode)),
        "channels-last": lambda: graphed_stacked(work, repeats, channels_last=True),
        "streams": lambda: per_client_streams(work, repeats, streams),
    }
    for name in ("graphed", *names):
        try:
            seconds, how = runs[name]()
            yield name, {"seconds": seconds, "how": how}
        except Exception as err:  # a variant that cannot run is said in one line; the others still run
            yield name, {"error": step_bounds.one_line(err)}
        finally:
            step_bounds.release(work.device)


def line(work: Workload, name: str, result: dict, base: float | None, backend: str, mode: str) -> str:
    """The printed line of one timing: ms per step (a step of all the clients) and the ratio to the graphed stacked
    step's seconds `base` (None: not known), or why it could not run."""
    labels = {"graphed": f"stacked step ({work.clients} clients, SGD move)",
              "compile": f"variant compile (torch.compile backend {backend}, mode {mode})",
              "channels-last": "variant channels-last (NHWC inputs)", "streams": "variant streams"}  # fmt: skip
    if "error" in result:
        return f"{labels[name]}: could not run: {result['error']}"
    ms = result["seconds"] / work.steps * 1e3
    ratio = "" if name == "graphed" or base is None else f", {result['seconds'] / base:.3f}× the stacked step"
    return f"{labels[name]}: {ms:.2f} ms/step ({result['how']}{ratio})"
