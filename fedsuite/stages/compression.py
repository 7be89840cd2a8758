"""What a run's compression of uploads is (docs/running/compression.md), read once from its config and shared by the
client stage (fedsuite/stages/compressed_upload.py) and the server stage (fedsuite/server/compressed_uploads.py):
the uplink compressor (fedsuite/compression), the error feedback, the names of the vectors an algorithm uploads,
the client state error feedback keeps (declared like every client state, fedsuite.state.plan.client_specs), the
seed of each compression draw, the wire name of a compressed array, and the refusal of k > d (the other refusals
are fedsuite.stages.compression_checks.compression_errors and secure aggregation's check).

The draws of a compressor (random-k's coordinates, QSGD's rounding) come from a generator seeded by (run seed,
round, partition, vector name); the server seeds random-k's the same way, so its seed is never sent. With
compress-up-mask='common' random-k's seed leaves the partition out: every client of a round keeps the same k
coordinates of a vector, so the uploads can be summed, and under SecAgg+ (`summed`) a compressed vector travels as
its k float32 values, which the secure sum masks and adds (docs/privacy-secagg.md).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from fedsuite.compression.base import Compressor
from fedsuite.compression.feedback import ERROR, ESTIMATE
from fedsuite.compression.qsgd import QSGD
from fedsuite.compression.randk import RandK
from fedsuite.compression.registry import CompressionSettings, build_compressor
from fedsuite.config.groups import uplink_compressor
from fedsuite.rules.declared import StateSpec, Vector

SUFFIX = "@compressed"  # a compressed array travels as `<vector>@compressed`, its Encoded bytes as uint8
DIM_KEY = "compressed-dim"  # reply metric: d of the compressed vectors (validation holds it to the model's)
FEEDBACK_STATE = {"ef": ERROR, "ef21": ESTIMATE}  # compress-feedback -> the client state it keeps per vector
_DRAWS = 0xC0  # keeps the compression draws apart from every other stream keyed by (seed, round, partition)


@dataclass(frozen=True)
class UplinkCompression:
    """A run's uplink compression: the compressor, the feedback ('none', 'ef', 'ef21'), the run seed, the
    federation's size N (EF21's server divides by it), random-k's mask ('own' or 'common', compress-up-mask) and
    whether the uploads go into SecAgg+'s sum (`summed`: each compressed vector travels as its k values)."""

    compressor: Compressor
    feedback: str
    seed: int
    num_clients: int
    mask: str = "own"
    summed: bool = False

    @classmethod
    def of_run(cls, cfg) -> UplinkCompression | None:
        """The compression of a resolved run config, or None when uploads are not compressed."""
        name = uplink_compressor(cfg)
        if name == "none":
            return None
        group = cfg.compression
        return cls(build_uplink(cfg, name), group.feedback, cfg.seed, cfg.num_clients, group.mask, cfg.secagg.on)

    def generator(self, server_round: int, partition_id: int, vector: str,
                  device: torch.device | str = "cpu") -> torch.Generator:  # fmt: skip
        """The generator of one vector's compression draws in one round, seeded the same on both sides. Random-k's
        is a CPU generator (its seed is read on the host, and the server draws it again); QSGD's per-coordinate
        draws come from a generator on the vector's `device`, which only the client needs. With mask 'common' the
        partition is left out of the seed, so every client of the round draws the same coordinates."""
        client = [] if self.mask == "common" else [partition_id]
        on = torch.device(device) if isinstance(self.compressor, QSGD) else torch.device("cpu")
        return seeded_generator(self.seed, [server_round, *client, zlib.crc32(vector.encode()), _DRAWS], on)

    def state_name(self, vector: str) -> str:
        """The client state error feedback keeps for upload vector `vector`."""
        return f"{FEEDBACK_STATE[self.feedback]}_{vector}"


def seeded_generator(seed: int, words: list[int], device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on `device` seeded from the run seed and `words` (round, partition, vector, stream), so
    that the server and a client derive the same one without sending it."""
    full = [int(seed) % 2**32, int(seed) // 2**32 % 2**32, *words]
    state = np.random.SeedSequence(full).generate_state(1, np.uint64)[0]
    return torch.Generator(device=device).manual_seed(int(state) % 2**63)


def more_than_d(key: str, k: int, dim: int) -> str:
    """The one-line refusal of a compressor's k (`key`) larger than the model's d."""
    return f"{key}={k}: more coordinates than the model's d = {dim:,}; give 1 ≤ {key} ≤ {dim:,}"


def build_uplink(cfg, name: str) -> Compressor:
    """The uplink compressor; random-k under error feedback keeps its values unscaled (the contractive form)."""
    group = cfg.compression
    if name == "randk" and group.feedback != "none":
        return RandK(group.k, scaled=False)
    return build_compressor(CompressionSettings(name, group.k, group.levels))


@cache
def _uploads(algorithm: str, items: tuple) -> tuple[str, ...]:
    from fedsuite.config.run_config import Config
    from fedsuite.registry import costs  # the rule's declarations, read as the algorithm tables read them

    return costs.upload_names(algorithm, Config(dict(items)))


def upload_vectors(cfg) -> tuple[str, ...]:
    """The d-vectors the algorithm's clients upload under `cfg` (its server rule's `uplink` and `uplink_some`): the
    vectors that are compressed. The model's buffers, which travel beside them, stay exact."""
    return _uploads(cfg.algorithm, tuple(sorted(dict(cfg).items())))


def feedback_specs(cfg) -> tuple[StateSpec, ...]:
    """The client state error feedback keeps: one float32 d-vector per upload vector (none without feedback)."""
    compression = UplinkCompression.of_run(cfg)
    if compression is None or compression.feedback == "none":
        return ()
    return tuple(Vector(compression.state_name(name), "float32") for name in upload_vectors(cfg))


def dimension_problem(cfg, dim: int) -> str | None:
    """Why the run's compressor cannot take the model's d-vectors (k > d), in one line naming the key; else None."""
    if uplink_compressor(cfg) in ("topk", "randk") and cfg.compression.k > dim:
        return more_than_d("compress-up-k", cfg.compression.k, dim)
    return None
