"""The client stages of a run (fedsuite/stages/client.py), in the order the client calls them: client-level DP's
release, DP-SGD. Each is left out when the run config does not switch it on, so a run without them calls none. The
server's side is built in fedsuite/server/stages.py."""

from __future__ import annotations

from fedsuite.privacy.dp_sgd import SampleLevelStage
from fedsuite.privacy.release import ClientLevelRelease
from fedsuite.stages.client import ClientStage


def client_stages(cfg) -> list[ClientStage]:
    """The client stages of a resolved run config (fedsuite.config.run_config.Config)."""
    found = [ClientLevelRelease.of_run(cfg), SampleLevelStage.of_run(cfg)]
    return [stage for stage in found if stage is not None]
