"""A SuperNode's half of a share message (fedsuite/batched/shares.py): its clients' instructions unpacked, trained
by the node's batched dispatcher (one per run, so that each reason a client trains alone is logged once per run
and process), and their replies packed into one. A client that fails is one error reply in the share, never the
whole share."""

from __future__ import annotations

import logging
import threading
from functools import partial

from fedsuite.batched.dispatch import BatchedDispatcher, Member
from fedsuite.batched.shares import LOST_KEY, pack_replies, unpack_instructions
from fedsuite.codec.payload import PARTITION_KEY
from fedsuite.node.client import error_reply

log = logging.getLogger("flwr.fedsuite")
FIRST_SHARE = "first share"  # the dispatcher's said-set entry once the node's first share has been reported
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
    dispatcher = dispatcher_of(int(worker.context.run_id))
    replies = dispatcher.train([
        Member(partial(worker._client, own_config), partial(list, own), own_config,
               partial(worker.fit, own, own_config))
        for own, own_config in members
    ])  # fmt: skip
    if FIRST_SHARE not in dispatcher.said:  # once per run and process: what became of the node's first share
        dispatcher.said.add(FIRST_SHARE)
        alone = len(members) - sum(dispatcher.stacked)
        log.info("fedsuite │ batch-clients: this node's first share, %d clients, trained as stacked groups of %s%s",
                 len(members), dispatcher.stacked or "none", f", {alone} alone" if alone else "")  # fmt: skip
    triples = []
    for (_, own_config), reply in zip(members, replies, strict=True):
        if isinstance(reply, BaseException):  # its own path raised: the server counts it failed, as a lost message
            reply = ([], 0, _error(own_config, reply))
        triples.append(reply)
    return pack_replies(triples)


def _error(config, err: BaseException) -> dict:
    """The member's error reply, marked as a failure outside its client's fit (LOST_KEY)."""
    return {**error_reply(int(config.get(PARTITION_KEY, -1)), err), LOST_KEY: 1}
