"""Flower ClientApp: run config + the partition a message is for → the algorithm's NumPyClient.

A SuperNode is a worker, not a client: every fit message names the partition (logical client) it is
for (`fedsuite.partition-id` in its config), and the node builds that partition's client for that message. Data
and models are cached per process (fedsuite.node.holdings, bounded), client state is per partition, in the tier the
run's state plan chooses (fedsuite.state.plan), so one node can train any number of partitions, one after another
or at once.

Node config keys: `partition-id`, `num-partitions` (Flower fills them in simulation; a deployed SuperNode tied to
one partition, client-mapping='fixed', gets them with --node-config and reports them when the server asks),
optionally `data-dir` (a folder with the node's own copy of the dataset files; the node then trains on all of
it instead of a partition of the run's dataset), `client-state-dir` (where on-disk client state goes, in a
`run-<key>` subfolder: the state key the server sends, the id of the run that started the experiment, which a run
resumed after a SuperLink crash keeps; Flower's run id for a message without one) and `allowed-modules` (the
modules whose import-path models and loaders this node runs,
fedsuite.node.trust; a run naming another is refused before anything is imported, with an error reply) and
`dp-noise-secret` (mixed into the seed of the node's DP noise shares, docs/privacy.md).
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace

from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

from fedsuite.batched.shares import is_share
from fedsuite.codec.payload import PARTITION_KEY, STATE_KEY
from fedsuite.config.run_config import Config, resolve_cached
from fedsuite.data import with_data_clients
from fedsuite.node.client import client_for
from fedsuite.node.holdings import ClientNode
from fedsuite.node.trust import NodeConfigError, NodeRefused, check
from fedsuite.privacy.secagg_client import SecureUploadRefused, is_secure, secagg_mod, secure_reply
from fedsuite.state.file_tier import FileTier
from fedsuite.state.folders import StateFolderTaken
from fedsuite.state.host_memory import reuse_host_memory
from fedsuite.state.plan import TIERS, StatePlan, state_plan

_STATE_KEY = re.compile(r"[0-9A-Za-z_-]{1,64}")  # what a state key may be: it names a folder
NOISE_SECRET_KEY = "dp-noise-secret"  # node config: the node's secret for its DP noise shares
# runs whose whole federation runs in this process (the in-process engine, fedsuite/run/inprocess.py, adds its run
# while it trains), so the client-state plan may keep their memory state in the process (StatePlan.tier). Held in the
# process, never in a node config: a SuperNode, whose ClientApp runs in other processes, can never be told so.
ONE_PROCESS_RUNS: set[int] = set()


def node_for(context: Context, partition_id: int | None = None, state_key: str | None = None) -> ClientNode:
    """The node of `partition_id` (default: the one in the node config) with its client-state store; node-held
    state (node config client-state-dir) is in the `run-<state_key>` subfolder (default: Flower's run id)."""
    nc, cfg = context.node_config, resolve_cached(context.run_config)  # the same run config in every message
    check(cfg, nc)  # the operator's allow-list, before any of the run's code or data is touched
    reuse_host_memory(cfg.run_control.reuse_host_memory)  # this worker's process
    cfg = _with_data_clients(cfg)
    if partition_id is None:
        if "partition-id" not in nc or "num-partitions" not in nc:
            raise KeyError("node config needs partition-id and num-partitions (SuperNode --node-config)")
        partition_id, num_partitions = int(nc["partition-id"]), int(nc["num-partitions"])
    else:
        num_partitions = cfg.num_clients
    # a node's own files serve datasets read from files; synthetic federations are generated from the run seed
    data_dir = str(nc["data-dir"]) if nc.get("data-dir") and not cfg.is_synthetic else None
    if data_dir and "partition-id" in nc and int(partition_id) != int(nc["partition-id"]):
        raise ValueError(f"this SuperNode holds its own data (node config data-dir) as partition {nc['partition-id']} "
                         f"but was sent partition {partition_id}: run with client-mapping='fixed'")  # fmt: skip
    node = ClientNode(cfg, int(partition_id), num_partitions, data_dir)
    node.noise_secret = noise_secret(nc)
    one_process = context.run_id in ONE_PROCESS_RUNS
    plan = state_plan(cfg, node.model.dim, int(node.model.buffers.numel()), one_process=one_process,
                      device=node.device)  # fmt: skip
    if plan.holds:
        node_dir = nc.get("client-state-dir")  # a SuperNode's own folder serves run after run: one subfolder per
        # experiment, so a run never starts from another's vectors; a restarted SuperNode keeps the run id
        # and a resumed run sends its first run's id as the state key
        key = context.run_id if state_key is None else state_key
        if not _STATE_KEY.fullmatch(str(key)):  # it names a folder under the operator's client-state-dir
            raise NodeConfigError(f"state key {str(key)[:40]!r} from the server: expected digits, letters, _ or -")
        if node_dir:
            plan = replace(plan, configured=f"{node_dir}/run-{key}")
        root = plan.root(context.run_id)
        _checked(root, str(key), "node config client-state-dir" if node_dir else "client-state-dir", plan)
        node.store = plan.open_store(root, node.partition_id, owner_key=str(key))  # claimed at its first write
    return node


def client_of(context: Context, config) -> NumPyClient:
    """The algorithm's client of the partition a message's config names (else the node config's), on `context`'s
    node: what the ClientApp builds for each message."""
    pid = config.get(PARTITION_KEY) if config else None
    key = config.get(STATE_KEY) if config else None
    node = node_for(context, None if pid is None else int(pid), None if key is None else str(key))
    return client_for(node.cfg, node)


_DATA_CLIENTS: dict[int, tuple[Config, Config]] = {}  # id of a resolved Config → (it, with its data's clients)
_DATA_CLIENTS_SLOTS = 16
_DATA_CLIENTS_LOCK = threading.Lock()


def _with_data_clients(cfg: Config) -> Config:
    """`with_data_clients(cfg)` (partition='natural' counts the data's groups), once per resolved run config."""
    found = _DATA_CLIENTS.get(id(cfg))
    if found is not None and found[0] is cfg:
        return found[1]
    result = with_data_clients(cfg)
    with _DATA_CLIENTS_LOCK:
        _DATA_CLIENTS[id(cfg)] = (cfg, result)  # holding cfg keeps its id from being reused
        while len(_DATA_CLIENTS) > _DATA_CLIENTS_SLOTS:
            _DATA_CLIENTS.pop(next(iter(_DATA_CLIENTS)))
    return result


def noise_secret(node_config) -> int:
    """The node's secret for its DP noise (node config dp-noise-secret, docs/privacy.md), 0 when none: mixed into the
    seed of its noise shares so that a server that knows the run seed cannot reproduce and remove them."""
    given = str(node_config.get(NOISE_SECRET_KEY, "") or "")
    if not given:
        return 0
    if not given.isdigit() or len(given) > 38:
        raise NodeConfigError(f"node config {NOISE_SECRET_KEY}: expected a decimal number of at most 38 digits, e.g. "
                              "from `python -c 'import secrets; print(secrets.randbits(126))'`")  # fmt: skip
    return int(given)


_CHECKED: set[tuple[str | None, str, str]] = set()  # (tier, folder, state key) this process found free or its run's


def _checked(root, key: str, setting: str, plan: StatePlan | None = None) -> None:
    """The client-state folder holds no other run's vectors (the check_owner of `plan`'s tier, fedsuite.state.tier;
    without a plan, the files tier's); once per tier, folder and key in a process. Otherwise a NodeConfigError: the
    client answers with an error reply instead of training."""
    tier = plan.tier() if plan is not None else FileTier.name
    checked = (tier, str(root), key)
    if checked in _CHECKED:
        return
    try:
        TIERS[tier].check_owner(root, key, setting)
    except StateFolderTaken as err:
        raise NodeConfigError(str(err)) from None
    _CHECKED.add(checked)


class Worker(NumPyClient):
    """Hands each message to the client of the partition it names; without a name, the node config's."""

    READ_ONLY_ARRAYS = True  # it passes the arrays to a RuleClient, which copies what it keeps

    def __init__(self, context: Context):
        self.context = context

    def _client(self, config) -> NumPyClient:
        return client_of(self.context, config)

    def _partition(self, config) -> int:
        """The partition a message is for (its config's, else the node config's; -1 if neither names one)."""
        pid = config.get(PARTITION_KEY) if config else None
        pid = self.context.node_config.get("partition-id", -1) if pid is None else pid
        return int(pid)

    def get_properties(self, config):
        try:
            return self._client(config).get_properties(config)
        except (
            NodeRefused,
            NodeConfigError,
        ):  # still say which partition this node is, so that its fit messages carry the refusal
            nc = self.context.node_config
            if "partition-id" not in nc or "num-partitions" not in nc:
                raise
            return {"partition-id": int(nc["partition-id"]), "num-partitions": int(nc["num-partitions"])}

    def get_parameters(self, config):
        return self._client(config).get_parameters(config)

    def fit(self, parameters, config):
        if is_share(config):  # several clients' instructions in one message (batch-clients=true, logical mapping)
            if is_secure(self.context.run_config):
                raise SecureUploadRefused("a share of several clients cannot go into a secure sum")
            from fedsuite.batched.share_node import fit_share  # it builds clients as this module does: imported here

            return fit_share(self, parameters, config)
        try:
            client = self._client(config)
        except (
            NodeRefused,
            NodeConfigError,
        ) as err:  # an error reply, as a failed fit: the server logs it and writes clients.log
            if is_secure(self.context.run_config):  # no error reply can go into a secure sum
                raise SecureUploadRefused(f"{type(err).__name__}: {err}") from None
            return [], 0, {"partition-id": self._partition(config), "error": f"{type(err).__name__}: {err}"}
        if is_secure(self.context.run_config):  # its upload goes into a secure sum: checked here, refused by raising
            return secure_reply(client.node, config, *client.fit(parameters, config))
        return client.fit(parameters, config)

    def evaluate(self, parameters, config):
        try:
            client = self._client(config)
        except (NodeRefused, NodeConfigError) as err:  # an error reply, as a failed evaluation
            return 0.0, 0, {"partition-id": self._partition(config), "error": f"{type(err).__name__}: {err}"}
        return client.evaluate(parameters, config)


def client_fn(context: Context):
    return Worker(context).to_client()


# secagg_mod hands every message that is not part of a SecAgg+ round on untouched (docs/privacy-secagg.md)
app = ClientApp(client_fn=client_fn, mods=[secagg_mod])
