"""The run-config rules of the system keys (docs/running/systems.md), one line each; read by fedsuite/config.py
after every key passed its own check. No torch, no Flower."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def local_work_errors(v: Mapping[str, Any]) -> list[str]:
    """`local-work`, `local-steps-min` and what they do not combine with."""
    mode, low, high = v.get("local-work"), v.get("local-steps-min"), v.get("local-steps")
    if mode is None or low is None or high is None:
        return []
    if mode == "equal":
        if low:
            return [f"local-steps-min={low} is read only with local-work='uniform' or 'per-round'; leave it out, or "
                    "set local-work"]  # fmt: skip
        return []
    errors = []
    if high == 0:
        errors.append(f"local-work={mode!r} draws K_i from [local-steps-min, local-steps]; local-steps=0 is epoch "
                      "mode, whose K_i = E·⌈n_i/B⌉ already differ with n_i: set local-steps (the largest K_i) or "
                      "local-work='equal'")  # fmt: skip
    if low < 1:
        errors.append(f"local-work={mode!r} needs local-steps-min >= 1, the smallest K_i it draws")
    elif high and low > high:
        errors.append(f"local-steps-min={low} > local-steps={high}: K_i is drawn from [local-steps-min, local-steps]; "
                      "set local-steps-min <= local-steps")  # fmt: skip
    if mode == "per-round" and v.get("dp-sgd") is True:
        errors.append("dp-sgd=true with local-work='per-round': a client's privacy ledger counts its rounds with one "
                      "K_i; use local-work='uniform' (K_i fixed per client) or 'equal'")  # fmt: skip
    return errors
