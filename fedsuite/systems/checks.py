"""The run-config rules of the system keys (docs/running/systems.md), one line each; read by
fedsuite/config/run_config.py after every key passed its own check (`system_errors`). No torch, no Flower.

The drop policy's check and availability's check draw the run's speeds and availability from the seed, as the run
will: a deadline no client can meet, or a round without any available client, is refused before training."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from fedsuite.privacy.settings import ClientPrivacy
from fedsuite.systems.availability import Availability
from fedsuite.systems.deadline import Deadline
from fedsuite.systems.dropout import Dropouts
from fedsuite.systems.work import LocalWork


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


def deadline_errors(v: Mapping[str, Any]) -> list[str]:
    """`round-deadline`, `deadline-policy`, `client-speed`, `speed-spread`, and what they do not combine with."""
    keys = ("round-deadline", "deadline-policy", "client-speed", "speed-spread", "local-steps")
    if any(key not in v for key in keys):  # a key that failed its own check is reported already
        return []
    deadline, policy, speeds, spread = v["round-deadline"], v["deadline-policy"], v["client-speed"], v["speed-spread"]
    errors = []
    if speeds == "equal" and spread != 1.0:
        errors.append(f"speed-spread={spread:g} is read only with client-speed='uniform'; leave it out, or set "
                      "client-speed")  # fmt: skip
    if not deadline:
        if speeds != "equal" or policy != "partial":
            set_keys = [f"{k}={v[k]!r}" for k, d in (("client-speed", "equal"), ("deadline-policy", "partial"))
                        if v[k] != d]  # fmt: skip
            errors.append(f"{' and '.join(set_keys)} {'is' if len(set_keys) == 1 else 'are'} read only with a round "
                          "deadline: set round-deadline > 0 (in local steps of a speed-1 client), or leave "
                          f"{'it' if len(set_keys) == 1 else 'them'} out")  # fmt: skip
        return errors
    if v["local-steps"] == 0:
        errors.append(f"round-deadline={deadline} is counted in local steps, but local-steps=0 is epoch mode, whose "
                      "K_i = E·⌈n_i/B⌉ the server does not know: set local-steps")  # fmt: skip
        return errors
    if policy == "drop" and "num-clients" in v and "seed" in v:
        planned = _smallest_planned_steps(v)
        model, n = Deadline.from_values(v), int(v["num-clients"])
        if planned is not None and not _any_client_meets(model, n, planned):
            errors.append(f"round-deadline={deadline} with deadline-policy='drop': no client can finish its local "
                          f"steps in time (the fastest does {_fastest_budget(model, n)} steps), so every round would "
                          "lose its whole cohort; raise round-deadline, or use deadline-policy='partial'")  # fmt: skip
    return errors


def _smallest_planned_steps(v: Mapping[str, Any]) -> tuple[int, ...] | None:
    """Each client's smallest planned K_i over the run (local-work: equal → local-steps, uniform → its K_i,
    per-round → local-steps-min), or None when the local-work keys are not valid (reported already)."""
    if "local-work" not in v or "local-steps-min" not in v or local_work_errors(v):
        return None
    work = LocalWork.from_values(v)
    n = int(v["num-clients"])
    if work.mode == "uniform":
        return tuple(work.steps(1, pid) for pid in range(n))
    return (work.low if work.mode == "per-round" else work.high,) * n


@cache
def _any_client_meets(deadline: Deadline, num_clients: int, planned: tuple[int, ...]) -> bool:
    """(cached: every process resolves the run config, each client message too)"""
    return any(deadline.budget(pid) >= planned[pid] for pid in range(num_clients))


@cache
def _fastest_budget(deadline: Deadline, num_clients: int) -> int:
    return max(deadline.budget(pid) for pid in range(num_clients))


def availability_errors(v: Mapping[str, Any]) -> list[str]:
    """`availability`: a model that leaves some round of the run without any client to sample."""
    keys = ("availability", "availability-p-off", "availability-p-on", "availability-period",
            "availability-fraction", "num-clients", "num-server-rounds", "seed")  # fmt: skip
    if any(key not in v for key in keys) or v["availability"] == "always":
        return []
    model = Availability.from_values(v)
    empty = model.first_empty_round(int(v["num-server-rounds"]))
    if empty is None:
        return []
    how = ("raise availability-p-on or lower availability-p-off" if model.mode == "markov"
           else "raise availability-fraction")  # fmt: skip
    return [f"availability={model.mode!r} leaves no client available in round {empty} (seed={v['seed']}, "
            f"num-clients={v['num-clients']}): that round could sample nobody; {how}, or use more clients"]  # fmt: skip


def privacy_interplay_errors(v: Mapping[str, Any]) -> list[str]:
    """The system models that client-level DP (dp != 'off', docs/privacy.md) cannot account for truthfully."""
    mode = ClientPrivacy.from_values(v).mode
    if mode == "off":
        return []
    errors = []
    if (availability := Availability.from_values(v)) is not None:
        errors.append(f"dp={mode!r} with availability={availability.mode!r}: the accountant's amplification by "
                      "subsampling assumes every client can be sampled in every round; use "
                      "availability='always'")  # fmt: skip
    if mode == "clients":
        if (dropouts := Dropouts.from_values(v)).on:
            errors.append(f"dp='clients' with dropout-rate={dropouts.rate:g}: a dropped client's noise share "
                          "would be missing from the sum; use dp='server', or dropout-rate=0")  # fmt: skip
        if Deadline.from_values(v).drops:
            errors.append("dp='clients' with deadline-policy='drop': a late client's noise share would be missing "
                          "from the sum; use dp='server', or deadline-policy='partial'")  # fmt: skip
    return errors


def system_errors(v: Mapping[str, Any]) -> list[str]:
    """Every rule of the system keys, read by fedsuite/config/run_config.py after every key passed its own check."""
    return local_work_errors(v) + deadline_errors(v) + availability_errors(v) + privacy_interplay_errors(v)
