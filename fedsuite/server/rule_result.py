"""What a server rule's `aggregate` gives back, checked where the adapter takes it (fedsuite.server.adapter).

A rule, a plug-in's above all (docs/own/algorithm.md), returns the new global model and leaves its declared
d-vectors (fedsuite.rules.declared: `Vector`, `Table`, `History`) as attributes. An array of another shape would fail
later, far from its cause, in torch or in a client. `new_model` converts the returned model exactly as before
(float32) and checks its shape and the shapes of the declared d-vectors: a wrong one is a RuleResultError, one line
naming the algorithm and its rule class, the array and both shapes; an `aggregate` that forgets to return (None)
is one line of its own. Only checks: the numbers are untouched.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsuite.rules.declared import History, Table, Vector


class RuleResultError(ValueError):
    """A server rule returned or kept an array of the wrong shape."""


def _owner(algorithm: str, rule: Any) -> str:
    cls = type(rule)
    return f"algorithm {algorithm!r} (server rule {cls.__module__}:{cls.__qualname__})"


def _declared_vectors(rule: Any):
    """(name, array) for every d-vector the rule declares, as it holds them now."""
    for spec in rule.state_specs():
        value = getattr(rule, spec.name, None)
        if isinstance(spec, Vector):
            yield spec.name, value
        elif isinstance(spec, Table) and isinstance(value, dict):
            yield from ((f"{spec.name}[{key!r}]", vector) for key, vector in value.items())
        elif isinstance(spec, History) and value is not None:
            yield from ((f"{spec.name}[{i}]", vector) for i, vector in enumerate(value))


def new_model(algorithm: str, rule: Any, server_round: int, returned: Any) -> np.ndarray:
    """`returned` (what `rule.aggregate` gave back in `server_round`) as the float32 global model, after checking
    that it and the rule's declared d-vectors have the model's shape (d,); else RuleResultError."""
    expected = (rule.dim,)
    where = f"round {server_round}: {_owner(algorithm, rule)}"
    if returned is None:  # as an array it would be a NaN scalar, and the run would look diverged or misshapen
        raise RuleResultError(f"{where}: aggregate returned None: return the new model (an array of shape "
                              f"{expected}), e.g. `return self.x + step`")  # fmt: skip
    try:  # a rule placed on the device returns a tensor there (fedsuite/rules/vectors.py): it stays there
        x = returned.to(torch.float32) if isinstance(returned, torch.Tensor) else np.asarray(returned, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise RuleResultError(f"{where}: aggregate() returned {type(returned).__name__}, not an array of shape "
                              f"{expected} (the new global model x): {err}") from None  # fmt: skip
    if tuple(x.shape) != expected:
        raise RuleResultError(f"{where}: aggregate() returned the new global model x with shape {tuple(x.shape)}, "
                              f"expected {expected}")  # fmt: skip
    for name, value in _declared_vectors(rule):
        shape = getattr(value, "shape", None)
        shape = tuple(shape) if shape is not None else None
        if shape != expected:
            got = shape if shape is not None else type(value).__name__
            raise RuleResultError(f"{where}: declared state {name} has shape {got} after aggregate(), expected "
                                  f"{expected}")  # fmt: skip
    return x
