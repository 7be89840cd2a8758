"""The one line a run with batch-clients=true gets where clients train one at a time regardless: the ServerApp under
`flwr run` (the Ray simulation, deployments) and secure aggregation. Imports nothing heavy: the ServerApp reads it."""

from __future__ import annotations

import logging

log = logging.getLogger("flwr.fedsuite")


def say_unbatched(cfg, where: str) -> None:
    """One warning line when batch-clients=true is set where no engine batches (`where` says why)."""
    if cfg["batch-clients"]:
        log.warning("fedsuite │ batch-clients=true is ignored: %s; clients train one at a time "
                    "(docs/running/batched.md)", where)  # fmt: skip
