"""Client replies checked before anything is averaged in: an error reply, wrong or missing arrays, a wrong shape,
non-finite values, an unsampled partition, no examples or steps are all rejected (and logged by the caller), never
aggregated. Also: one-line descriptions of Flower's failures."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Collection, Mapping

import numpy as np
import torch
from flwr.common import FitRes

from fedsuite.codec.device_arrays import DeviceArrays
from fedsuite.codec.device_parameters import device_tensors
from fedsuite.codec.payload import ARRAYS_KEY, PayloadError, nbytes, unpack
from fedsuite.rules.rounds import Reply
from fedsuite.server import blockwise
from fedsuite.server.wire import arrays_of

# Client errors (fedsuite/node/client.py sends "<ExceptionName>: message") that mean local training diverged.
DIVERGENCE_ERRORS = ("FloatingPointError",)
LOST_WORKER = "ActorDiedError"  # Flower's simulation reports a dead Ray worker this way; it is never replaced


class RejectedReply(ValueError):
    """A client reply that is not averaged in; `diverged` marks non-finite training as the cause."""

    def __init__(self, reason: str, diverged: bool = False, details: str = ""):
        super().__init__(reason)
        self.diverged, self.details = diverged, details


def validate(res: FitRes, expected: Callable[[int], Collection[str]], sampled: Collection[int], dim: int,
             widen: Callable[[np.ndarray], np.ndarray] | None = None) -> Reply:  # fmt: skip
    """The reply as float64 arrays, or RejectedReply. `expected(partition)` names the arrays it must hold; `widen`
    makes an array's float64 copy (default `astype`; the strategy's WideCopies reuses earlier rounds' buffers). A
    reply whose arrays stayed on the device (fedsuite/codec/device_arrays.py) is checked there and keeps them there
    (DeviceArrays), with the same checks and messages."""
    metrics = dict(res.metrics or {})
    if "error" in metrics:
        error = str(metrics["error"])
        raise RejectedReply(error, error.startswith(DIVERGENCE_ERRORS), str(metrics.get("traceback", "")))
    pid, wide, received = _checked_arrays(res, metrics, expected, dim, widen)
    if pid not in sampled:
        raise RejectedReply(f"partition-id {pid} was not sampled this round")
    steps = metric_number(metrics, "steps", 0)
    if res.num_examples <= 0 or steps <= 0:
        raise RejectedReply(f"num_examples={res.num_examples}, steps={metrics.get('steps')}: must be positive")
    loss = metric_number(metrics, "loss", 0.0)
    if not np.isfinite(loss):
        raise RejectedReply(f"training loss is {loss}", diverged=True)
    if "first-loss" in metrics:  # the loss before any local step: the run guard's reference (fedsuite.server.guard)
        try:
            first = float(metrics["first-loss"])
        except (TypeError, ValueError):
            raise RejectedReply(f"first-loss={metrics['first-loss']!r} is not a number") from None
        if not np.isfinite(first):
            raise RejectedReply(f"first-loss is {first}: the received model's loss is not finite", diverged=True)
    return Reply(
        partition_id=pid,
        num_examples=int(res.num_examples),
        steps=steps,
        lr=metric_number(metrics, "lr", 0.0),
        arrays=wide,
        metrics=metrics,
        uplink_bytes=received,
    )


def _checked_arrays(res: FitRes, metrics: dict, expected: Callable[[int], Collection[str]], dim: int,
                    widen: Callable[[np.ndarray], np.ndarray] | None) -> tuple[int, Mapping, int]:  # fmt: skip
    """`validate`'s checks of the reply's arrays (names, shapes, finiteness), in its order: (the partition id, the
    arrays the rule aggregates, the bytes received)."""
    on_device = device_tensors(res.parameters)  # the in-process batched round's tensors (DeviceParameters)
    try:
        received = arrays_of(res.parameters) if on_device is None else on_device  # views of the bytes, or tensors
        arrays = unpack(received, str(metrics.get(ARRAYS_KEY, "")))
    except PayloadError as err:
        raise RejectedReply(str(err)) from err
    pid = metric_number(metrics, "partition-id", -1)
    wanted = expected(pid)
    if set(arrays) != set(wanted):
        raise RejectedReply(f"arrays {sorted(arrays)} but this algorithm expects {sorted(wanted)}")
    # on the device: every array's finiteness read back at once (one wait for the device per reply)
    flags = [torch.isfinite(a).all() for a in arrays.values()] if on_device is not None else []
    finite = torch.stack(flags).tolist() if flags else None
    for i, (name, a) in enumerate(arrays.items()):
        if tuple(a.shape) != (dim,):
            raise RejectedReply(f"array {name!r} has shape {tuple(a.shape)}, expected ({dim},)")
        if not (all_finite(a) if finite is None else finite[i]):  # a float32 entry is finite iff its float64 copy is
            raise RejectedReply(f"array {name!r} has non-finite values", diverged=True)
    if on_device is None:  # the float64 copies the rule aggregates, and the bytes received
        size = nbytes(list(arrays.values()))
        wide = {name: a.astype(np.float64) if widen is None else widen(a) for name, a in arrays.items()}
    else:  # kept on the device; widened where the rule reads them (fedsuite/codec/device_arrays.py)
        wide, size = DeviceArrays(arrays), sum(4 * a.numel() for a in received)
    return pid, wide, size


def metric_number(metrics: dict, key: str, default: float | int) -> float | int:
    """metrics[key] as a number, a whole one where `default` is an int; RejectedReply naming it otherwise."""
    value = metrics.get(key, default)
    whole = isinstance(default, int)
    try:
        number = float(value)
        if whole and number != int(number):  # int() of inf or nan raises too
            raise ValueError(value)
        return int(number) if whole else number
    except (TypeError, ValueError, OverflowError):
        raise RejectedReply(f"{key}={value!r} is not a {'whole ' if whole else ''}number") from None


def all_finite(a: np.ndarray) -> bool:
    """`np.all(np.isfinite(a))` in one pass where it can be: a sum is finite only if every term is, so finite sums of
    its blocks (fedsuite/server/blockwise.py) settle it; a sum that overflows (finite terms near the float's limit)
    is checked term by term. A tensor (a rule's model on the device) is checked where it is."""
    if isinstance(a, torch.Tensor):
        return bool(torch.isfinite(a).all())
    flat = np.ascontiguousarray(a).reshape(-1)

    def block_sum(span: tuple[int, int]):
        with np.errstate(over="ignore", invalid="ignore"):  # a NaN or an overflow in a sum is an answer, not a warning
            return np.sum(flat[span[0] : span[1]])

    sums = blockwise.each(blockwise.spans(flat.size), block_sum)  # finite block sums: every entry is finite
    return bool(np.all(np.isfinite(sums))) or bool(np.all(np.isfinite(a)))


def describe_failure(failure) -> str:
    """One line: the exception (or the reply's status) without its traceback."""
    error = failure if isinstance(failure, BaseException) else failure[1]
    if isinstance(error, BaseException):
        first = str(error).strip().splitlines()
        text = f"{type(error).__name__}: {first[0] if first else ''}"
    else:
        status = getattr(error, "status", error)
        text = f"{getattr(getattr(status, 'code', None), 'name', 'error')}: {getattr(status, 'message', status)}"
    return text if len(text) <= 300 else text[:297] + "..."


def failure_details(failure) -> str:
    error = failure if isinstance(failure, BaseException) else failure[1]
    if isinstance(error, BaseException):
        return "".join(traceback.format_exception(error))
    return str(getattr(error, "status", error))
