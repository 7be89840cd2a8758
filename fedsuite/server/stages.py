"""The server stages of a run, in the order the strategy calls them (fedsuite/stages/server.py): client-level DP,
DP-SGD's target ε, the system models, pruning, secure aggregation's rules. Each is left out when the run config
does not switch it on, so a run without them calls no stage at all. The composition root
(fedsuite/server/compose.py) builds them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedsuite.server.privacy import ServerPrivacy
from fedsuite.server.pruning import Pruning
from fedsuite.server.sample_budget import SampleLevelBudget
from fedsuite.server.secure_sum import SecureSum
from fedsuite.stages.server import ServerStage
from fedsuite.systems.stage import SystemsStage


def server_stages(run_config: Mapping[str, Any], privacy: ServerPrivacy | None = None) -> list[ServerStage]:
    """The run's stages; `privacy`: the server's half of client-level DP (built with the rule, which it checks)."""
    found = [privacy, SampleLevelBudget.of_run(run_config), SystemsStage.of_run(run_config)]
    pruning = Pruning.from_run_config(run_config)
    found.append(pruning if pruning.marks else None)
    found.append(SecureSum.of_run(run_config))
    return [stage for stage in found if stage is not None]
