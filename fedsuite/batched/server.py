"""The fit rounds of batch-clients=true (docs/running/batched.md), which the composition root (fedsuite/run/compose.py)
gives the round loop (fedsuite.server.loop.RoundLoop). In process: Flower's fit round, its clients trained by the
batched dispatcher (fedsuite/batched/dispatch.py) instead of one `fit` per proxy (BatchedRound). Under `flwr run`:
each SuperNode's share of the round's clients sent as one message (fedsuite/batched/shares.py), which its ClientApp
trains batched (SharedRound). Both replace only the fit round's exchange; the rest is Flower's fit round. In process
on a CUDA card the replies stay on the device (fedsuite/batched/device_replies.py), and from the first round whose
replies all did, the server rule's vectors too (fedsuite/server/placement.py)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from flwr.common import Code

from fedsuite.batched import device_replies
from fedsuite.batched.dispatch import BatchedDispatcher, Member, flower_results
from fedsuite.batched.shares import LOST_KEY, pack_instructions, unpack_reply
from fedsuite.codec.device_parameters import device_tensors
from fedsuite.codec.payload import PARTITION_KEY
from fedsuite.node.app import client_of
from fedsuite.rules.vectors import OnDevice
from fedsuite.server.loop import FitRound, RoundLoop
from fedsuite.server.placement import allowed_on
from fedsuite.server.wire import arrays_of

log = logging.getLogger("flwr.fedsuite")


class LostWithShare(RuntimeError):
    """A client whose instruction travelled in a share message that was lost (the first member carries the loss)."""


class LostOnNode(RuntimeError):
    """A client of a share whose message the node could not hand to its client (what a lost message of one client
    is in the one-message path)."""


class BatchedRound(FitRound):
    """The in-process fit round: all of a round's fit instructions to one BatchedDispatcher."""

    def __init__(self):
        self.dispatcher = BatchedDispatcher()
        self.placed = False  # the strategy was asked to keep its rule on the device (`_place`)

    def exchange(self, loop: RoundLoop, instructions: list, server_round: int, timeout: float | None):
        members = [
            Member(device_replies.building(_builder(proxy, ins)), partial(_downlink, ins.parameters), ins.config,
                   partial(proxy.fit, ins, timeout, server_round))
            for proxy, ins in instructions
        ]  # fmt: skip
        replies = [device_replies.as_fit_res(reply) for reply in self.dispatcher.train(members)]
        self._place(loop.strategy, replies, server_round)
        return flower_results(instructions, replies)

    def _place(self, strategy, replies: list, server_round: int) -> None:
        """The first round whose replies all kept their arrays on one device (allowed_on) asks the strategy to keep its
        rule there for the rest of the run (fedsuite/server/placement.py); said once, either way."""
        if self.placed or not hasattr(strategy, "place"):
            return
        device = device_replies.one_device(replies)
        if device is None or not allowed_on(device):
            return
        self.placed = True
        why = strategy.place(OnDevice(device))
        if why is None:
            log.info("fedsuite │ batch-clients: from round %d the server rule's vectors stay on %s", server_round,
                     device)  # fmt: skip
        else:
            log.info("fedsuite │ batch-clients: the server rule's vectors stay on the host: %s", why)


class SharedRound(FitRound):
    """The `flwr run` fit round: the instructions routed to one SuperNode go as one share message (a node with one
    client gets its instruction as it is); the node's reply is split into one reply per client, each checked on its
    own by the strategy. A lost share message is one failure per client it carried."""

    def __init__(self):
        self.said = False

    def exchange(self, loop: RoundLoop, instructions: list, server_round: int, timeout: float | None):
        shares: dict[str, list] = {}
        for proxy, ins in instructions:
            shares.setdefault(proxy.cid, []).append((proxy, ins))
        if not self.said:  # once per run: where the round's clients went
            self.said = True
            log.info("fedsuite │ batch-clients: round %d's %d clients in %d message(s), each node's share trained "
                     "there as one batched computation", server_round, len(instructions), len(shares))  # fmt: skip
        with ThreadPoolExecutor(max_workers=loop.max_workers) as pool:
            answers = list(pool.map(lambda share: _send(share, server_round, timeout), shares.values()))
        return [r for results, _ in answers for r in results], [f for _, failures in answers for f in failures]


def _downlink(parameters) -> list:
    """A fit instruction's arrays: the tensors of one kept on the device (DeviceParameters), else read-only views of
    its bytes."""
    tensors = device_tensors(parameters)
    return arrays_of(parameters) if tensors is None else list(tensors)


def _builder(proxy, ins):
    """How the ClientApp would build the instruction's client on the proxy's node (None for a proxy without one)."""
    context = getattr(proxy, "context", None)
    return None if context is None else partial(client_of, context, ins.config)


def _send(share: list, server_round: int, timeout: float | None) -> tuple[list, list]:
    """One node's share → (results, failures) as Flower's fit_clients gives them."""
    proxy = share[0][0]
    members = [ins for _, ins in share]
    message = members[0] if len(members) == 1 else pack_instructions(members)
    try:
        res = proxy.fit(message, timeout, server_round)
    except Exception as err:  # the message was lost: the first member carries its error, the others name it
        pids = [ins.config.get(PARTITION_KEY) for ins in members]
        lost = [LostWithShare(f"client {pid} was lost with the message that carried clients {pids} to node "
                              f"{proxy.cid}") for pid in pids[1:]]  # fmt: skip
        return [], [err, *lost]
    results, failures = [], []
    for reply in [res] if len(members) == 1 else unpack_reply(res, members):
        if reply.status.code != Code.OK:
            failures.append((proxy, reply))
        elif (reply.metrics or {}).get(LOST_KEY):  # failed outside its client's fit on the node: a failure
            failures.append(LostOnNode(f"client {reply.metrics.get('partition-id')}: {reply.metrics.get('error')}"))
        else:
            results.append((proxy, reply))
    return results, failures
