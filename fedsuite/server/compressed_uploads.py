"""`DecodedUploads`: the server stage (fedsuite/stages/server.py) of compressed uplinks. It takes each compressed
array (`<vector>@compressed`, uint8 bytes) out of a reply before the reply is validated and puts the decoded float32
d-vector back under the vector's name (`take`: the decoding needs the reply's partition, which seeds random-k's
coordinates, and d, the reply's metric `DIM_KEY`, which validation then holds to the model's), so validation, the
rule and every other stage see plain vectors. It records the bytes that really travelled, which the round's row
reports (`screen`). Under SecAgg+ (random-k with compress-up-mask='common', docs/privacy-secagg.md) a compressed
array holds the cohort's mean of the k values at the round's common coordinates: it is scattered back to them
(scaled by d/k in the unbiased form, as random-k's decoding does), and the bytes counted are SecAgg+'s masked
integers, 8 a value. With EF21 it keeps the server's estimate g of each upload
vector as checkpointed state: a client sends c_i = C(x_i − g_i), and the rule is handed g + (|S|/N)·c_i from each
of the |S| replies, whose uniform mean is g + (1/N) Σ_S c_i, the library's server step (fedsuite.compression.feedback
.ef21_server_step), which g then becomes (docs/running/compression.md#ef21)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedsuite.codec.payload import PayloadError, unpack
from fedsuite.compression.base import Encoded
from fedsuite.compression.randk import RandK, draw_seed, random_indices
from fedsuite.rules.rounds import Reply
from fedsuite.server.replies import RejectedReply
from fedsuite.server.wire import array_bytes, array_view
from fedsuite.stages.compression import DIM_KEY, SUFFIX, UplinkCompression
from fedsuite.stages.server import ServerStage

EF21_STATE = "compression_estimates"  # the strategy's checkpointed state: upload vector -> the server's g
MASKED_BYTES = np.dtype(np.int64).itemsize  # SecAgg+ sends each masked integer (mod 2**32) as an int64


class DecodedUploads(ServerStage):
    def __init__(self, compression: UplinkCompression):
        self.compression = compression
        self.sent_bytes: dict[int, int] = {}  # this round: partition -> the bytes of its reply's arrays as sent
        self.estimates: dict[str, np.ndarray] = {}  # EF21: upload vector -> g (float64), zeros before its first
        self.state_name = EF21_STATE if compression.feedback == "ef21" else None

    @classmethod
    def of_run(cls, run_config) -> DecodedUploads | None:
        compression = UplinkCompression.of_run(run_config)
        return None if compression is None else cls(compression)

    def round_config(self, server_round: int, cohort) -> dict[str, Any]:
        self.sent_bytes = {}
        return {}

    def take(self, server_round: int, tensors: list[bytes], names: str, metrics: Mapping[str, Any]):
        """Every compressed array decoded in its place (a float32 `.npy`; the reply's `metrics` give its partition
        and d), the others as they came; what it took: the reply's bytes as sent."""
        try:
            named = unpack(tensors, names)
            partition_id, dim = int(metrics.get("partition-id", -1)), int(metrics.get(DIM_KEY, 0))
        except (PayloadError, TypeError, ValueError) as err:
            raise RejectedReply(str(err)) from err
        out, sent, summed = {}, 0, self.compression.summed
        for name, tensor in named.items():
            array = array_view(tensor)
            sent += array.size * MASKED_BYTES if summed else array.nbytes
            if name.endswith(SUFFIX):
                vector = name.removesuffix(SUFFIX)
                decode = self.scatter if summed else self.decode
                out[vector] = array_bytes(decode(server_round, partition_id, vector, array, dim))
            else:
                out[name] = tensor
        return list(out.values()), ",".join(out), sent

    def decode(self, server_round: int, partition_id: int, vector: str, array: np.ndarray, dim: int) -> np.ndarray:
        """One compressed vector back as float32 (RejectedReply for bytes that are not its encoding)."""
        compression = self.compression
        if dim <= 0 or array.dtype != np.uint8 or array.ndim != 1:
            raise RejectedReply(f"array {vector + SUFFIX!r}: expected the compressed bytes of a ({dim},) vector")
        compressor = compression.compressor
        seed = None
        if isinstance(compressor, RandK):  # the coordinates' seed, drawn as the client drew it
            seed = draw_seed(compression.generator(server_round, partition_id, vector))
        try:
            decoded = compressor.decompress(Encoded(array.tobytes(), seed), dim)
        except ValueError as err:
            raise RejectedReply(f"array {vector + SUFFIX!r}: {err}") from None
        return decoded.to(torch.float32).numpy()

    def scatter(self, server_round: int, partition_id: int, vector: str, array: np.ndarray, dim: int) -> np.ndarray:
        """Under SecAgg+: the cohort's mean of the k values back at the round's common coordinates, as float64 (the
        precision of the secure mean), scaled by d/k for the unbiased random-k (RejectedReply for another shape)."""
        compressor = self.compression.compressor
        k = compressor.k
        if not 0 < k <= dim or array.shape != (k,) or not np.issubdtype(array.dtype, np.floating):
            raise RejectedReply(f"array {vector + SUFFIX!r}: expected the secure mean of {k} values of a ({dim},) "
                                f"vector, got {array.dtype} {array.shape}")  # fmt: skip
        seed = draw_seed(self.compression.generator(server_round, partition_id, vector))  # common: one per round
        indices = random_indices(seed, dim, k, torch.device("cpu")).numpy()
        values = np.asarray(array, np.float64)
        dense = np.zeros(dim, np.float64)
        dense[indices] = values * (dim / k) if compressor.scaled else values
        return dense

    def keep(self, server_round: int, partition_id: int, taken: Any) -> None:
        if taken is not None:
            self.sent_bytes[partition_id] = int(taken)

    def screen(self, server_round: int, replies: list[Reply], rejected: int) -> tuple[list[Reply], int]:
        """Each reply's bytes up as they travelled (the compressed bytes, not the decoded vectors)."""
        for reply in replies:
            reply.uplink_bytes = self.sent_bytes.get(reply.partition_id, reply.uplink_bytes)
        return replies, rejected

    def release(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """EF21: each reply's c_i handed to the rule as g + (m/N)·c_i, m the number of replies that carry the vector
        (all of the cohort's, or the subset a rule's `uplink_some` names), so that their mean is the new g; g moves to
        g + (1/N) Σ c_i."""
        if self.compression.feedback != "ef21":
            return {}
        clients = [r for r in replies if r.partition_id >= 0]
        for vector in {name for r in clients for name in r.arrays}:
            sent = [r.arrays[vector] for r in clients if vector in r.arrays]
            share = len(sent) / self.compression.num_clients
            g = self.estimates.get(vector, np.zeros_like(sent[0], np.float64))
            for reply in clients:
                if vector in reply.arrays:
                    reply.arrays[vector] = g + share * reply.arrays[vector]
            self.estimates[vector] = g + np.sum(sent, axis=0) / self.compression.num_clients
        return {}

    def state_dict(self) -> dict[str, np.ndarray]:
        return {name: g.copy() for name, g in self.estimates.items()}

    def load_state_dict(self, values: Any) -> None:
        if not isinstance(values, dict):
            raise ValueError(f"{EF21_STATE}: expected a dict of upload vector → estimate, got {type(values).__name__}")
        self.estimates = {str(k): np.asarray(v, np.float64).copy() for k, v in values.items()}
