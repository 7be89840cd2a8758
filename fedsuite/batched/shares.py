"""A node's share of a round (batch-clients=true under `flwr run`, docs/running/batched.md#under-flwr-run): the fit
instructions of the clients one SuperNode carries, sent as one message and answered with one, so that the node can
train them as one batched computation.

Downlink: one FitIns whose arrays are the arrays every member's instruction begins with (the model and the round's
shared downlink, sent once), then each member's own arrays in member order; its config holds SHARE_KEY (the member
count), SHARED_KEY (how many arrays lead) and each member's config under `fedsuite.share.<i>.`, with `#own` its own
array count. Uplink: one reply whose arrays are the members' arrays in member order; its metrics hold SHARE_KEY and
each member's metrics under the same prefixes, with `#arrays` its array count and `#examples` its num_examples.
Each member's reply is then checked on its own, as any reply is: a member that failed is one failed client, and a
reply that does not hold what it counts, or answers for another client than the one sent in its place, is rejected
for each of its clients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from flwr.common import Code, FitIns, FitRes, Parameters, Status

from fedsuite.codec.payload import PARTITION_KEY

SHARE_KEY = "fedsuite.share"  # config / metrics: the number of members
SHARED_KEY = "fedsuite.share.shared"  # config: the number of leading arrays every member's instruction holds
PREFIX = "fedsuite.share."
OWN, ARRAYS, EXAMPLES = "#own", "#arrays", "#examples"  # a member's counts, beside its own keys
LOST_KEY = "fedsuite.lost"  # a member's reply: its own path raised on the node, as a lost message would


class ShareError(ValueError):
    """A share message or reply that does not hold what its counts say."""


def is_share(config: Mapping[str, Any] | None) -> bool:
    return bool(config) and SHARE_KEY in config


def _key(i: int, name: str) -> str:
    return f"{PREFIX}{i}.{name}"


def _member_values(values: Mapping[str, Any], i: int) -> dict[str, Any]:
    prefix = f"{PREFIX}{i}."
    return {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}


def _count(values: Mapping[str, Any], key: str, what: str) -> int:
    value = values.get(key)
    try:
        n = int(value)
        if isinstance(value, bool) or n != value:  # 1.5 or "3" are no counts
            raise ValueError(value)
    except (TypeError, ValueError, OverflowError):
        raise ShareError(f"{what}: {key}={value!r} is missing or not a whole number") from None
    if n < 0:
        raise ShareError(f"{what}: {key}={n} is negative")
    return n


# ---- the server's half ------------------------------------------------------------------------------------------
def pack_instructions(instructions: Sequence[FitIns]) -> FitIns:
    """The members' instructions as one FitIns (module docstring)."""
    tensors = [ins.parameters.tensors for ins in instructions]
    shared = min(len(t) for t in tensors)
    for j in range(shared):  # the leading arrays all members hold (one serialisation of them, mostly)
        first = tensors[0][j]
        if any(t[j] is not first and t[j] != first for t in tensors[1:]):
            shared = j
            break
    config: dict[str, Any] = {SHARE_KEY: len(instructions), SHARED_KEY: shared}
    out = list(tensors[0][:shared])
    for i, (ins, own) in enumerate(zip(instructions, tensors, strict=True)):
        config.update({_key(i, k): v for k, v in ins.config.items()})
        config[_key(i, OWN)] = len(own) - shared
        out += own[shared:]
    return FitIns(Parameters(tensors=out, tensor_type=instructions[0].parameters.tensor_type), config)


def unpack_reply(res: FitRes, members: Sequence[FitIns]) -> list[FitRes]:
    """The share's reply as one FitRes per member, in member order. A reply that does not hold what its counts say
    gives every member an error reply (rejected and logged as that client's, never averaged in)."""
    metrics = res.metrics or {}
    try:
        if res.status.code != Code.OK:
            raise ShareError(f"the share's reply has status {res.status.code.name}: {res.status.message}")
        if _count(metrics, SHARE_KEY, "share reply") != len(members):
            raise ShareError(f"the share's reply holds {metrics.get(SHARE_KEY)} members, {len(members)} were sent")
        replies, start = [], 0
        for i in range(len(members)):
            own = _member_values(metrics, i)
            n = _count(own, ARRAYS, f"member {i}")
            examples = _count(own, EXAMPLES, f"member {i}")
            if start + n > len(res.parameters.tensors):
                raise ShareError(f"the share's reply holds {len(res.parameters.tensors)} arrays, fewer than counted")
            member_metrics = {k: v for k, v in own.items() if k not in (ARRAYS, EXAMPLES)}
            sent = members[i].config.get(PARTITION_KEY)
            if member_metrics.get("partition-id") != sent:  # each slot answers for the client sent in it
                raise ShareError(f"member {i} answers as partition-id {member_metrics.get('partition-id')!r}, but "
                                 f"client {sent} was sent in that place")  # fmt: skip
            part = Parameters(tensors=res.parameters.tensors[start : start + n], tensor_type=res.parameters.tensor_type)
            replies.append(FitRes(Status(Code.OK, "Success"), part, examples, member_metrics))
            start += n
        if start != len(res.parameters.tensors):
            raise ShareError(f"the share's reply holds {len(res.parameters.tensors)} arrays, {start} counted")
        return replies
    except Exception as err:  # whatever a broken node sends: every member rejected, never the run stopped
        message = str(err) if isinstance(err, ShareError) else f"{type(err).__name__}: {err}"
        return [_error_res(ins, f"ShareError: {message}") for ins in members]


def _error_res(ins: FitIns, message: str) -> FitRes:
    pid = ins.config.get(PARTITION_KEY, -1)
    return FitRes(Status(Code.OK, "Success"), Parameters([], ""), 0, {"partition-id": pid, "error": message})


# ---- the node's half --------------------------------------------------------------------------------------------
def unpack_instructions(arrays: Sequence[np.ndarray], config: Mapping[str, Any]) -> list[tuple[list, dict]]:
    """The share message's (arrays, config) of each member, in member order (ShareError if the counts disagree)."""
    n, shared = _count(config, SHARE_KEY, "share"), _count(config, SHARED_KEY, "share")
    lead, start, members = [_read_only(a) for a in arrays[:shared]], shared, []
    for i in range(n):
        own = _member_values(config, i)
        count = _count(own, OWN, f"member {i}")
        if start + count > len(arrays):
            raise ShareError(f"the share holds {len(arrays)} arrays, fewer than its members count")
        members.append(([*lead, *arrays[start : start + count]], {k: v for k, v in own.items() if k != OWN}))
        start += count
    if start != len(arrays):
        raise ShareError(f"the share holds {len(arrays)} arrays, its members count {start}")
    return members


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view: the members share the leading arrays, so a client copies what it would write
    (fedsuite.node.client's READ_ONLY_ARRAYS contract)."""
    view = array.view()
    view.flags.writeable = False
    return view


def pack_replies(replies: Sequence[tuple[list, int, dict]]) -> tuple[list, int, dict]:
    """The members' NumPyClient.fit triples as the share's one triple (module docstring)."""
    arrays: list = []
    metrics: dict[str, Any] = {SHARE_KEY: len(replies)}
    for i, (own, examples, own_metrics) in enumerate(replies):
        arrays += own
        metrics.update({_key(i, k): v for k, v in own_metrics.items()})
        metrics[_key(i, ARRAYS)] = len(own)
        metrics[_key(i, EXAMPLES)] = int(examples)
    return arrays, sum(int(r[1]) for r in replies), metrics
