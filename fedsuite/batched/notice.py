"""Where a run with batch-clients=true still trains its clients one at a time, and the one line that says so: under
`flwr run` the server decides before the first round whether each node's share of a round travels in one message;
in process, secure aggregation sums each upload as it arrives. Imports nothing heavy: the ServerApp reads it."""

from __future__ import annotations

import logging

log = logging.getLogger("flwr.fedsuite")
BUFFERS = "the model has buffers (BatchNorm statistics), which a forward pass updates per client"


def say_unbatched(cfg, where: str) -> None:
    """One warning line when batch-clients=true is set where no engine batches (`where` says why)."""
    if cfg.batching.clients:
        log.warning("fedsuite │ batch-clients=true is ignored: %s; clients train one at a time "
                    "(docs/running/batched.md)", where)  # fmt: skip


def why_not_shared(cfg, has_buffers: bool) -> str | None:
    """Why a run's rounds under `flwr run` go out one message per client although batch-clients=true, or None."""
    if cfg.secagg.on:
        return "secagg=true sends each client's upload into the secure sum on its own"
    if cfg.run_control.client_mapping != "logical":
        return "client-mapping='fixed' keeps each client on its own node"
    if cfg.sample_privacy.enabled:
        return "dp-sgd clips per-record gradients one client at a time"
    if has_buffers:
        return BUFFERS
    return None
