"""Where a run with batch-clients=true still trains its clients one at a time, and the one line that says so: under
`flwr run` the server decides before the first round whether each node's share of a round travels in one message;
in process, the batched dispatcher decides it per run (fedsuite.batched.dispatch.run_unbatched). The reasons are
the run's round stages' (ClientStage.trains_alone: fedsuite/stages/client_run.py builds them, the model's buffers'
stage among them when the model has buffers) and the client mapping's (docs/running/batched.md)."""

from __future__ import annotations

import logging

from fedsuite.stages.client_run import client_stages
from fedsuite.stages.model_buffers import TRAINS_ALONE

log = logging.getLogger("flwr.fedsuite")
BUFFERS = TRAINS_ALONE  # why a model with buffers trains one client at a time (fedsuite.batched.model)
FIXED_MAPPING = "client-mapping='fixed' keeps each client on its own node"


def say_unbatched(cfg, where: str) -> None:
    """One warning line when batch-clients=true is set where no engine batches (`where` says why)."""
    if cfg.batching.clients:
        log.warning(
            "fedsuite │ batch-clients=true is ignored: %s; clients train one at a time (docs/running/batched.md)", where
        )


def why_not_shared(cfg, has_buffers: bool) -> str | None:
    """Why a run's rounds under `flwr run` go out one message per client although batch-clients=true, or None: the
    first of its stages' reasons, the client mapping's, the model buffers' (`has_buffers`: the model has any)."""
    reasons = [stage.trains_alone for stage in client_stages(cfg) if stage.trains_alone]
    if cfg.run_control.client_mapping != "logical":
        reasons.append(FIXED_MAPPING)
    if has_buffers:
        reasons.append(BUFFERS)
    return reasons[0] if reasons else None
