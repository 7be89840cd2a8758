"""The server stages of a run, in the order the strategy calls them (fedsuite/stages/server.py): compressed broadcasts,
the decoding of compressed uploads (docs/running/compression.md), the model's averaged buffers, client-level DP,
DP-SGD's target ε, the system models, pruning, secure aggregation's rules. Each is left out when the run does not switch
it on, so a run without them calls no stage at all. The composition root (fedsuite/server/compose.py) builds them.
`StageLookup` finds a strategy's stage of a kind; `arrays_beside`, `addressed` and `take_arrays` carry the stages'
arrays (ServerStage.downlink, addressed, take)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import numpy as np
from flwr.common import FitRes, Parameters

from fedsuite.codec.payload import ARRAYS_KEY
from fedsuite.config.settings import value_of
from fedsuite.server.buffers import AveragedBuffers
from fedsuite.server.compressed_downloads import CompressedBroadcast
from fedsuite.server.compressed_uploads import DecodedUploads
from fedsuite.server.privacy import ServerPrivacy
from fedsuite.server.pruning import Pruning
from fedsuite.server.sample_budget import SampleLevelBudget
from fedsuite.server.secure_sum import SecureSum
from fedsuite.stages.server import ServerStage
from fedsuite.systems.stage import SystemsStage


def server_stages(
    run_config: Mapping[str, Any], privacy: ServerPrivacy | None = None, buffers: np.ndarray | None = None
) -> list[ServerStage]:
    """The run's stages; `privacy`: the server's half of client-level DP (built with the rule, which it checks);
    `buffers`: the model's initial buffers when the server averages them (buffers='average'), else None."""
    found = [
        CompressedBroadcast.of_run(run_config),
        DecodedUploads.of_run(run_config),
        AveragedBuffers.of_model(buffers, str(value_of(run_config, "weighting"))),
    ]
    found += [privacy, SampleLevelBudget.of_run(run_config), SystemsStage.of_run(run_config)]
    pruning = Pruning.from_run_config(run_config)
    found.append(pruning if pruning.marks else None)
    found.append(SecureSum.of_run(run_config))
    return [stage for stage in found if stage is not None]


def arrays_beside(stages: Iterable[ServerStage], server_round: int) -> dict[str, np.ndarray]:
    """The stages' arrays every fit and evaluate message carries beside the model (ServerStage.downlink)."""
    return {k: v for stage in stages for k, v in stage.downlink(server_round).items()}


def addressed(stages: Iterable[ServerStage], server_round: int, partition_id: int, accepted_round: int,
              shared: Mapping[str, np.ndarray]) -> tuple[Mapping[str, np.ndarray], dict[str, Any]]:  # fmt: skip
    """One client's arrays in place of the shared ones, and its fit-config entries, as the stages address them
    (ServerStage.addressed); `shared` itself when no stage changes them."""
    arrays, entries = shared, {}
    for stage in stages:
        arrays, more = stage.addressed(server_round, partition_id, accepted_round, arrays)
        entries.update(more)
    return arrays, entries


def take_arrays(stages: list[ServerStage], server_round: int, res: FitRes) -> tuple[FitRes, list[tuple[Any, Any]]]:
    """The reply without the arrays the stages take out before it is validated (ServerStage.take), and each stage
    with what it took; an error reply carries no arrays and is left as it is, and so is a reply no stage takes from
    (its arrays' bytes stay as they came: a reply is never encoded again, except a compressed array, which the
    compression stage decodes into a float32 one)."""
    metrics = dict(res.metrics or {})
    if "error" in metrics or not stages:
        return res, []
    tensors, names, taken = res.parameters.tensors, str(metrics.get(ARRAYS_KEY, "")), []
    for stage in stages:
        tensors, names, arrays = stage.take(server_round, tensors, names, metrics)
        taken.append((stage, arrays))
    if tensors is res.parameters.tensors:
        return res, taken
    metrics[ARRAYS_KEY] = names
    return FitRes(res.status, Parameters(list(tensors), res.parameters.tensor_type), res.num_examples, metrics), taken


S = TypeVar("S", bound=ServerStage)


class StageLookup:
    """A strategy's stages found by their kind (`self.stages`): what a caller reads of a mechanism (client-level DP's
    clip, the averaged buffers) it asks of that mechanism's stage, never of the strategy."""

    stages: list[ServerStage]

    def stage(self, kind: type[S]) -> S | None:
        """The run's stage of class `kind`, or None when the run does not switch that mechanism on."""
        return next((stage for stage in self.stages if isinstance(stage, kind)), None)
