"""Named flat arrays <-> Flower's ordered ndarray list; the names ride in config/metrics under ARRAYS_KEY.

Downlink: FitIns.parameters = [model, extra_1, …], FitIns.config[ARRAYS_KEY] = "model,extra_1,…".
Uplink:   FitRes.parameters = [delta, extra_1, …], FitRes.metrics[ARRAYS_KEY] = "delta,extra_1,…".
Arrays are stripped by name, never by position, so an algorithm adds an extra without touching anyone else.
Every array travels as float32, except bytes: a uint8 array (a compressed vector, docs/running/compression.md)
travels as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

ARRAYS_KEY = "fedsuite.arrays"
# Fit config: the last round in which the server accepted this client's reply (0: never), fedsuite.state.store.
STATE_ACCEPTED = "fedsuite.state-accepted"
# Fit config: the partition (logical client) this message is for; a SuperNode trains whichever it is told.
PARTITION_KEY = "fedsuite.partition-id"
# Fit/evaluate config: the run id of the run that started the experiment (kept across resumes); a SuperNode's
# node-held client state lives in `client-state-dir/run-<key>`, so a resumed run (a new Flower run id) finds it.
# A string: Flower's run ids are unsigned 64-bit, config integers signed.
STATE_KEY = "fedsuite.state-key"
ALGORITHM_KEY = "fedsuite.algorithm"  # fit config: the server's algorithm, checked by the client
T = TypeVar("T")


class PayloadError(ValueError):
    """A message's arrays do not match the names it declares."""


def pack(named: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    return [_wire(a) for a in named.values()], names_of(named)


def names_of(named: Mapping[str, Any]) -> str:
    """The ARRAYS_KEY value naming `named`'s arrays in order; PayloadError for a name that cannot travel."""
    for name in named:
        if not name or "," in name:
            raise PayloadError(f"array name {name!r}: must be non-empty and contain no comma")
    return ",".join(named)


def _wire(array: np.ndarray) -> np.ndarray:
    """A flat float32 array, or a flat uint8 one for bytes."""
    dtype = np.uint8 if np.asarray(array).dtype == np.uint8 else np.float32
    return np.ascontiguousarray(array, dtype=dtype).reshape(-1)


def unpack(arrays: Sequence[np.ndarray], names: str) -> dict[str, np.ndarray]:
    keys = str(names).split(",") if names else []
    if "" in keys:
        raise PayloadError(f"empty array name in {names!r}")
    if len(keys) != len(arrays):
        raise PayloadError(f"{len(arrays)} arrays but {len(keys)} names ({names!r})")
    if len(set(keys)) != len(keys):
        raise PayloadError(f"duplicate array names in {names!r}")
    return dict(zip(keys, arrays, strict=True))


def nbytes(arrays: Sequence[np.ndarray]) -> int:
    return int(sum(a.nbytes for a in arrays))


def split_off(arrays: Sequence[T], names: str, name: str) -> tuple[list[T], str, T | None]:
    """(the other arrays, their names, the array called `name` or None): how the model's buffers, which travel beside
    an algorithm's arrays, are taken out before the algorithm's reply is validated. The arrays may be a message's
    encoded tensors, which then stay as they came."""
    named = unpack(arrays, names)
    extra = named.pop(name, None)
    return list(named.values()), ",".join(named), extra


def weighted_mean(vectors: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Σ w_i v_i / Σ w_i in float64, in the given order, as float32."""
    total = np.zeros(vectors[0].shape, np.float64)
    for vector, weight in zip(vectors, weights, strict=True):
        total += float(weight) * np.asarray(vector, np.float64)
    return (total / float(sum(weights))).astype(np.float32)
