"""Declared algorithm state: what a server rule keeps between rounds and what each client keeps between its rounds.

An algorithm names its state once, as a tuple of specs; everything that must know about state reads the specs, never
attribute names: checkpoints and resume (`state_dict` / `load_state_dict`), the client-state store (which names it
may hand out), the memory estimate printed before a run (`units`, in multiples of d) and the registry's table.

    Vector("c")                 one d-vector, zeros at first
    Table("h_table")            one d-vector per partition, created on first use (server-side mirrors)
    History("history", length=2)  the newest `length` d-vectors, newest first (FedMIM's δ's)
    Counter("accepted")         one integer per partition (the server's acceptance ledger)
    Value("initial_loss")       one number or None
    Buffers("buffers")          the model's own buffers (BatchNorm statistics), kept per client (buffers='local')

No Flower and no torch here: the specs are plain data, read by light code (the registry, the preflight).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StateSpec:
    name: str
    dtype: str = "float64"

    @property
    def units(self) -> int:
        """Size in multiples of d per holder (per client for client state; tables count per partition)."""
        return 0

    def initial(self, dim: int) -> Any:
        raise NotImplementedError

    def check(self, value: Any, dim: int) -> str | None:
        """Why `value` cannot be this state for a model of size `dim`, or None."""
        return None


def _vector_problem(name: str, value: Any, dim: int, dtype: str) -> str | None:
    if not isinstance(value, np.ndarray) or value.shape != (dim,) or value.dtype != np.dtype(dtype):
        shape = getattr(value, "shape", type(value).__name__)
        return f"{name}: expected a ({dim},) {dtype} array, got {shape} {getattr(value, 'dtype', '')}".rstrip()
    return None


@dataclass(frozen=True)
class Vector(StateSpec):
    @property
    def units(self) -> int:
        return 1

    def initial(self, dim: int) -> np.ndarray:
        return np.zeros(dim, self.dtype)

    def check(self, value: Any, dim: int) -> str | None:
        return _vector_problem(self.name, value, dim, self.dtype)


@dataclass(frozen=True)
class Table(StateSpec):
    """partition id → d-vector, filled as partitions are first seen."""

    @property
    def units(self) -> int:
        return 1

    def initial(self, dim: int) -> dict[int, np.ndarray]:
        return {}

    def check(self, value: Any, dim: int) -> str | None:
        if not isinstance(value, dict):
            return f"{self.name}: expected a dict of partition → vector"
        for pid, vector in value.items():
            if (problem := _vector_problem(f"{self.name}[{pid}]", vector, dim, self.dtype)) is not None:
                return problem
        return None


@dataclass(frozen=True)
class History(StateSpec):
    length: int = 1

    @property
    def units(self) -> int:
        return self.length

    def initial(self, dim: int) -> deque:
        return deque(maxlen=self.length)

    def check(self, value: Any, dim: int) -> str | None:
        if not isinstance(value, deque) or value.maxlen != self.length:
            return f"{self.name}: expected a history of at most {self.length} vectors"
        for i, vector in enumerate(value):
            if (problem := _vector_problem(f"{self.name}[{i}]", vector, dim, self.dtype)) is not None:
                return problem
        return None


@dataclass(frozen=True)
class Counter(StateSpec):
    """partition id → integer (e.g. the last round a partition's reply was accepted)."""

    dtype: str = "int"

    def initial(self, dim: int) -> dict[int, int]:
        return {}

    def check(self, value: Any, dim: int) -> str | None:
        ok = isinstance(value, dict) and all(isinstance(k, int) and isinstance(v, int) for k, v in value.items())
        return None if ok else f"{self.name}: expected a dict of partition → integer"


@dataclass(frozen=True)
class Value(StateSpec):
    """One number (or None until it is known)."""

    dtype: str = "float"

    def initial(self, dim: int) -> float | None:
        return None

    def check(self, value: Any, dim: int) -> str | None:
        ok = value is None or isinstance(value, int | float | np.floating | np.integer)
        return None if ok else f"{self.name}: expected a number or None"


@dataclass(frozen=True)
class Buffers(StateSpec):
    """The model's floating-point buffers (BatchNorm statistics) a client keeps for itself (buffers='local',
    FedBN-style): one vector of the buffers' size, not of d, so it adds nothing to the d-multiples of the estimate.
    A client without it yet starts from the model's initial buffers."""

    dtype: str = "float32"


BUFFERS = Buffers("buffers")  # also the payload name of the averaged buffers (buffers='average')


LAST_ITERATE = Vector("x_last", "float32")  # the client's own last local model x_{i,K} (relaxed-init > 0)


def model_state(buffers: str, relaxed_init: float = 0.0) -> tuple[StateSpec, ...]:
    """The client state every algorithm's client keeps for the model itself, besides the algorithm's own
    declaration: its buffers under buffers='local', and its last local model under relaxed-init > 0
    (docs/running/relaxed-init.md)."""
    return ((BUFFERS,) if buffers == "local" else ()) + ((LAST_ITERATE,) if relaxed_init > 0 else ())


def units(specs: Iterable[StateSpec]) -> int:
    """Total size of `specs` in multiples of d."""
    return sum(spec.units for spec in specs)


def initial_state(specs: Iterable[StateSpec], dim: int) -> dict[str, Any]:
    return {spec.name: spec.initial(dim) for spec in specs}


def check_state(specs: Iterable[StateSpec], values: Mapping[str, Any], dim: int, owner: str) -> None:
    """Raise ValueError unless `values` holds exactly the declared names, each of its declared kind and size."""
    specs = tuple(specs)
    names = {spec.name for spec in specs}
    if set(values) != names:
        raise ValueError(f"{owner}: the state has {sorted(values)}, the declaration {sorted(names)}")
    for spec in specs:
        if (problem := spec.check(values[spec.name], dim)) is not None:
            raise ValueError(f"{owner}: {problem}")
