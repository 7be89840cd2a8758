"""The client stages of a run (fedsuite/stages/client.py), in the order the client calls them: the rebuilding of
compressed broadcasts (first, so every other stage reads the copy the client trains from), secure aggregation's,
client-level DP's release, DP-SGD, then the model's own: its buffers, relaxed initialisation; last, the compression
of the upload (after every release: docs/running/compression.md). Each is left out when
the run config (or the client's model: a buffer-free one) does not switch it on, so a run without them calls none.
The server's side is built in fedsuite/server/stages.py."""

from __future__ import annotations

from typing import Any

from fedsuite.privacy.dp_sgd import SampleLevelStage
from fedsuite.privacy.release import ClientLevelRelease
from fedsuite.privacy.secagg_stage import SecureUpload
from fedsuite.stages.client import ClientStage
from fedsuite.stages.compressed_download import CompressedDownload
from fedsuite.stages.compressed_upload import CompressedUpload
from fedsuite.stages.model_buffers import ModelBuffers
from fedsuite.stages.relaxed_init import RelaxedStart


def client_stages(cfg, client_rule: Any = None) -> list[ClientStage]:
    """The client stages of a resolved run config (fedsuite.config.run_config.Config); with `client_rule` (the
    client's ClientRule, on its node) the model's own stages too."""
    found = [SecureUpload.of_run(cfg), ClientLevelRelease.of_run(cfg), SampleLevelStage.of_run(cfg)]
    if client_rule is not None:
        found.insert(0, CompressedDownload.of_client(cfg, client_rule))  # every later stage reads the rebuilt copy
        found += [ModelBuffers.of_client(cfg, client_rule), RelaxedStart.of_client(cfg, client_rule)]
        found.append(CompressedUpload.of_client(cfg, client_rule))
    return [stage for stage in found if stage is not None]
