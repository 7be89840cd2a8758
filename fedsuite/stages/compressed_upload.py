"""`CompressedUpload`: the client stage (fedsuite/stages/client.py) that compresses each vector the algorithm
uploads, after every other stage released it (client-level DP's clip and noise come first, so compression is
post-processing), on the vector's device. What travels is the compressor's bytes as a uint8 array named
`<vector>@compressed` (fedsuite.stages.compression.SUFFIX), or under SecAgg+ (random-k with a common mask) its k
values as float32, which the secure sum quantizes, masks and adds like any array (docs/privacy-secagg.md); the
model's buffers and anything else beside the algorithm's vectors stay exact. With error feedback the client keeps,
per vector, its declared state (classic: the error not yet sent; EF21: its estimate g_i), read and written through
the client's state, so checkpoints, resume and the accepted-round rule cover it (docs/running/compression.md)."""

from __future__ import annotations

from typing import Any

import torch

from fedsuite.compression.bits import float32_values, from_bytes
from fedsuite.compression.feedback import ERROR, ESTIMATE, ef21_step, ef_step
from fedsuite.stages.client import ClientStage
from fedsuite.stages.compression import DIM_KEY, SUFFIX, UplinkCompression, upload_vectors

STEPS = {"ef": (ef_step, ERROR), "ef21": (ef21_step, ESTIMATE)}


class CompressedUpload(ClientStage):
    def __init__(self, compression: UplinkCompression, vectors: tuple[str, ...], client_rule: Any = None):
        """`vectors`: the upload vectors to compress; `client_rule`: the client's ClientRule (its state holds the
        error feedback's vectors)."""
        self.compression, self.vectors, self.client_rule = compression, frozenset(vectors), client_rule

    @classmethod
    def of_client(cls, cfg, client_rule: Any) -> CompressedUpload | None:
        """The stage when the run compresses uploads, else None."""
        compression = UplinkCompression.of_run(cfg)
        return None if compression is None else cls(compression, upload_vectors(cfg), client_rule)

    def release(self, uplink: dict, fit, node) -> tuple[dict, dict[str, Any]]:
        """Every upload vector replaced by its compressed bytes, in place in the upload's order; under SecAgg+ by
        random-k's k values as float32 (its bytes are exactly those values), so the secure sum adds them."""
        wire = float32_values if self.compression.summed else from_bytes
        out = {}
        for name, value in uplink.items():
            if name in self.vectors:
                out[name + SUFFIX] = wire(self.encode(name, value, fit.ctx.round, node.partition_id))
            else:
                out[name] = value
        return out, {DIM_KEY: int(node.model.dim)}

    def encode(self, name: str, value: torch.Tensor, server_round: int, partition_id: int) -> bytes:
        """The bytes of one vector this round, through the error feedback's step and state when there is one."""
        compression = self.compression
        x = value.detach().reshape(-1).to(torch.float32)
        generator = compression.generator(server_round, partition_id, name, x.device)
        if compression.feedback == "none":
            return compression.compressor.compress(x, generator).data
        step, key = STEPS[compression.feedback]
        state, held = self.client_rule.state, compression.state_name(name)
        kept = state.get(held).to(device=x.device, dtype=torch.float32)
        done = step(compression.compressor, x, {key: kept}, generator, encode=True)
        state.set(held, done.state[key])
        return done.encoded.data
