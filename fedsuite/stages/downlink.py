"""What a run's compression of broadcasts is (docs/running/compression.md#downlink), read once from its config and
shared by the server stage (fedsuite/server/compressed_downloads.py) and the client stage
(fedsuite/stages/compressed_download.py).

Every d-vector the server broadcasts to the whole cohort (the model, and the vectors the algorithm's server rule
names in `sends`: SCAFFOLD's c, FedCM's direction, ...) has a public copy v̂ that the server and every client that
took part can rebuild. Each round the server sends the change m_r = C(v − v̂) with a contractive compressor C and
moves v̂ ← v̂ + C(v − v̂); the part not sent, v − v̂, is the server's accumulated error, sent in later rounds. A
client trains from v̂. A client that missed rounds gets the messages of the rounds it missed (the server keeps them
while they are cheaper than v̂ itself), or v̂ whole; it keeps its copy as declared client state
(`downlink_<vector>`), so checkpoints, resume and the accepted-round rule cover it, and the server knows which copy
a client holds: the one of the last round it accepted from that client.

The draws of random-k's coordinates come from a generator seeded by (run seed, round, vector), the same for every
client, so only the values travel.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from fedsuite.compression.base import Compressor
from fedsuite.compression.randk import RandK
from fedsuite.compression.registry import CompressionSettings, build_compressor
from fedsuite.rules.declared import StateSpec, Vector
from fedsuite.stages.compression import more_than_d, seeded_generator

SUFFIX = "@down"  # a round's message travels as `<vector>@down<round>` (uint8 bytes), v̂ whole as `<vector>@downfull`
WHOLE = "full"
CHECK = "crc"  # `<vector>@downcrc`: the CRC-32 of v̂ (4 bytes, little-endian), in every fit message broadcasting it
STATE_PREFIX = "downlink_"  # the client state holding its copy of a broadcast vector
_DRAWS = 0xD0  # keeps the downlink's draws apart from every other stream keyed by (seed, round)


@dataclass(frozen=True)
class DownlinkCompression:
    """A run's compressed broadcasts: the compressor, the run seed and the broadcast vectors it covers."""

    compressor: Compressor
    seed: int
    vectors: tuple[str, ...]

    @classmethod
    def of_run(cls, cfg) -> DownlinkCompression | None:
        """The downlink compression of a resolved run config, or None when broadcasts travel whole."""
        name = cfg.compression.downlink
        if name == "none":
            return None
        if name == "randk":  # unscaled: the accumulator needs a contractive compressor
            compressor: Compressor = RandK(cfg.compression.down_k, scaled=False)
        else:
            compressor = build_compressor(CompressionSettings(name, cfg.compression.down_k))
        return cls(compressor, cfg.seed, broadcast_vectors(cfg))

    def generator(self, server_round: int, vector: str) -> torch.Generator:
        """The CPU generator of one vector's draws in one round, seeded the same on the server and every client."""
        return seeded_generator(self.seed, [server_round, zlib.crc32(vector.encode()), _DRAWS])


def message_name(vector: str, server_round: int) -> str:
    return f"{vector}{SUFFIX}{server_round}"


def whole_name(vector: str) -> str:
    return f"{vector}{SUFFIX}{WHOLE}"


def state_name(vector: str) -> str:
    return STATE_PREFIX + vector


def checksum(values) -> int:
    """The CRC-32 of a vector's float32 bytes (a tensor on any device, or an array)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float32).numpy()
    return zlib.crc32(np.ascontiguousarray(values, dtype=np.float32).tobytes())


def check_name(vector: str) -> str:
    return f"{vector}{SUFFIX}{CHECK}"


@cache
def _broadcasts(algorithm: str, items: tuple) -> tuple[str, ...]:
    from fedsuite.config.run_config import Config
    from fedsuite.registry import costs  # the rule's declarations, read as the algorithm tables read them

    return costs.broadcast_names(algorithm, Config(dict(items)))


def broadcast_vectors(cfg) -> tuple[str, ...]:
    """The d-vectors the server broadcasts to the whole cohort under `cfg`: the model, then the rule's `sends`."""
    return _broadcasts(cfg.algorithm, tuple(sorted(dict(cfg).items())))


def downlink_specs(cfg) -> tuple[StateSpec, ...]:
    """The client state compressed broadcasts keep: one float32 d-vector per broadcast vector (none when off)."""
    if cfg.compression.downlink == "none":
        return ()
    return tuple(Vector(state_name(name), "float32") for name in broadcast_vectors(cfg))


def downlink_dimension_problem(cfg, dim: int) -> str | None:
    """Why the downlink compressor cannot take the model's d-vectors (k > d), in one line naming the key; else None."""
    if cfg.compression.downlink in ("topk", "randk") and cfg.compression.down_k > dim:
        return more_than_d("compress-down-k", cfg.compression.down_k, dim)
    return None
