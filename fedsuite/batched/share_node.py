"""A SuperNode's half of a share message (fedsuite/batched/shares.py): its clients' instructions unpacked, trained
by the node's batched dispatcher (one per run, so that each reason a client trains alone is logged once per run
and process), and their replies packed into one. A client that fails is one error reply in the share, never the
whole share."""

from __future__ import annotations

import threading
import traceback
from functools import partial

from fedsuite.batched.dispatch import BatchedDispatcher, Member
from fedsuite.batched.shares import pack_replies, unpack_instructions
from fedsuite.client_adapter import MAX_TRACEBACK_CHARS
from fedsuite.payload import PARTITION_KEY

_DISPATCHERS: dict[int, BatchedDispatcher] = {}  # run id → its dispatcher, the latest few runs of this process
_SLOTS = 8
_LOCK = threading.Lock()


def dispatcher_of(run_id: int) -> BatchedDispatcher:
    with _LOCK:
        if run_id not in _DISPATCHERS:
            _DISPATCHERS[run_id] = BatchedDispatcher()
            while len(_DISPATCHERS) > _SLOTS:
                _DISPATCHERS.pop(next(iter(_DISPATCHERS)))
        return _DISPATCHERS[run_id]


def fit_share(worker, arrays, config) -> tuple[list, int, dict]:
    """The share's reply: every member trained (batched where its rule and data allow), in member order.
    `worker.fit(arrays, config)` is the ClientApp's own path for one member."""
    members = unpack_instructions(arrays, config)
    replies = dispatcher_of(int(worker.context.run_id)).train([
        Member(worker.context, partial(list, own), own_config, partial(worker.fit, own, own_config))
        for own, own_config in members
    ])  # fmt: skip
    triples = []
    for (_, own_config), reply in zip(members, replies, strict=True):
        if isinstance(reply, BaseException):  # its own path raised: one error reply, as a lost message of one client
            reply = ([], 0, _error(own_config, reply))
        triples.append(reply)
    return pack_replies(triples)


def _error(config, err: BaseException) -> dict:
    details = "".join(traceback.format_exception(err))[-MAX_TRACEBACK_CHARS:]
    message = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    return {"partition-id": int(config.get(PARTITION_KEY, -1)), "error": message, "traceback": details}
