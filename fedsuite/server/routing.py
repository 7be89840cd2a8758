"""Which connected SuperNode carries each sampled partition's message this round.

Logical mapping: round-robin over the connected nodes in node-id order, no discovery (a node trains whichever
partition a message names; state lives in per-partition files, never in a node's Context, so two partitions on one
node cannot race); with `shares` = k > 0 (batch-clients=true), a round's fit cohort in min(k, nodes) consecutive
blocks instead, block j to the j-th node, so that each node's block can travel as one share message. Fixed
mapping: the node that reports the partition (asked once each; missing ones count as failures).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from flwr.common import FitRes, GetPropertiesIns
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

log = logging.getLogger("flwr.fedsuite")


class FederationError(RuntimeError):
    """The connected SuperNodes do not form the federation the run config describes."""


class Router:
    def __init__(self, num_clients: int, mapping: str, wait_seconds: float, workers: int, shares: int = 0):
        self.num_clients, self.mapping, self.wait_seconds, self.workers = num_clients, mapping, wait_seconds, workers
        self.shares = shares
        self.node_of: dict[int, ClientProxy] = {}  # fixed mapping: partition → its own SuperNode
        self.routed: dict[int, ClientProxy] = {}  # this round: partition → the node that carries its message

    def route(self, cohort: Sequence[int], client_manager: ClientManager,
              blocks: bool = True) -> dict[int, ClientProxy]:  # fmt: skip
        """Each partition of `cohort` → the node that carries its message (`blocks`=False: round-robin even with
        shares, for messages that travel one client each, such as federated evaluation)."""
        if self.mapping == "fixed":
            nodes = self._discover(client_manager)
            self.routed = {pid: nodes[pid] for pid in cohort if pid in nodes}
            return self.routed
        if not client_manager.wait_for(1, timeout=int(self.wait_seconds)):
            raise FederationError("no SuperNode connected")
        workers = sorted(client_manager.all().values(), key=lambda p: _node_order(p.cid))
        if self.shares and blocks:  # block j of k (sizes differing by at most one) to node j, one block a node
            k = min(self.shares, len(cohort), len(workers)) or 1
            self.routed = {pid: workers[(i * k // len(cohort)) % len(workers)] for i, pid in enumerate(cohort)}
        else:
            self.routed = {pid: workers[i % len(workers)] for i, pid in enumerate(cohort)}
        return self.routed

    def who(self, proxy: ClientProxy | None, res: FitRes | None = None) -> str:
        """'client <pid>' for a reply or failure, as exactly as the message allows."""
        pid = (res.metrics or {}).get("partition-id") if res is not None else None
        if pid is not None:
            return f"client {pid}"
        if proxy is None:
            return "a client"
        carried = sorted(p for p, node in self.routed.items() if node.cid == proxy.cid)
        if len(carried) == 1:
            return f"client {carried[0]}"
        return f"node {proxy.cid}" + (f" (carrying clients {carried})" if carried else "")

    def unanswered(self, pids: Sequence[int]) -> str:
        """Who a failure without a sender is (Flower keeps only the exception of a lost message): the sampled
        clients that sent nothing this round, with the nodes that carried them."""
        if not pids:
            return "a client"
        nodes = sorted({self.routed[p].cid for p in pids if p in self.routed})
        on = f" (node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))})" if nodes else ""
        if len(pids) == 1:
            return f"client {pids[0]}{on}"
        return f"one of clients {', '.join(map(str, pids))}{on}"

    def _discover(self, client_manager: ClientManager) -> dict[int, ClientProxy]:
        """Ask each connected node once for its partition-id (Flower's node ids are not partition ids)."""
        n = self.num_clients
        if len(self.node_of) >= n:
            return self.node_of
        if not client_manager.wait_for(1, timeout=int(self.wait_seconds)):
            raise FederationError("no SuperNode connected")
        deadline = time.monotonic() + self.wait_seconds
        while True:
            known = {p.cid for p in self.node_of.values()}
            fresh = [p for p in client_manager.all().values() if p.cid not in known]
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                answers = list(pool.map(_ask_partition, fresh))
            for proxy, ans in zip(fresh, answers, strict=True):
                if isinstance(ans, Exception):  # e.g. a node restarting as it was asked: asked again below
                    log.warning("node %s did not say which partition it holds (%s: %s); asked again until the "
                                "node wait ends", proxy.cid, type(ans).__name__, str(ans).strip()[:200])  # fmt: skip
                    continue
                pid, parts = int(ans.properties["partition-id"]), int(ans.properties["num-partitions"])
                if parts != n or not 0 <= pid < n:
                    raise FederationError(
                        f"client-mapping='fixed' and num-clients={n} but node {proxy.cid} reports partition-id={pid} "
                        f"of num-partitions={parts}; give every SuperNode --node-config "
                        f"\"partition-id=<0..{n - 1}> num-partitions={n}\", or use client-mapping='logical' "
                        "(any number of SuperNodes, each trains whichever partition a message names)"
                    )
                if pid in self.node_of and self.node_of[pid].cid != proxy.cid:
                    log.warning("partition %d: node %s replaces node %s", pid, proxy.cid, self.node_of[pid].cid)
                self.node_of[pid] = proxy
            if len(self.node_of) >= n or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if len(self.node_of) < n:
            log.warning("only %d of %d partitions have a node; the others count as failures", len(self.node_of), n)
        return self.node_of


def _ask_partition(proxy: ClientProxy):
    """The node's answer to "which partition do you hold?", or the exception its reply raised (a node that is gone
    or restarting answers with an error reply, which Flower raises as an exception)."""
    try:
        return proxy.get_properties(GetPropertiesIns({}), None, 0)
    except Exception as err:  # noqa: BLE001 - any failed answer leaves the node unmapped, never ends the run
        return err


def _node_order(cid: str) -> tuple:
    """Flower's node ids are integers in strings; numeric order where they are numbers."""
    return (0, int(cid), "") if cid.isdigit() else (1, 0, cid)
