"""Compression of what a round sends, without Flower (docs/developer/architecture.md, Round stages: a client stage
compresses what leaves, a server stage decodes). One job per module:

    base      the `Compressor` interface (compress → `Encoded` bytes, decompress, apply, encoded_bytes, unbiased,
              omega), the shared checks, and `Identity` (`none`)
    bits      bit packing of n-bit unsigned integers, float32 fields as bytes
    topk      `TopK` (`topk`): the k largest magnitudes, indices bit-packed at ceil(log2 d) bits
    randk     `RandK` (`randk`): k coordinates from a shared seed, only the values travel; scaled by d/k or not
    qsgd      `QSGD` (`qsgd`): unbiased stochastic quantization to s levels
    sign      `ScaledSign` (`sign`): one bit per coordinate and the mean magnitude
    feedback  error feedback, classic and EF21, as state-in, state-out functions over named tensors
    registry  the compressors by name, built from `CompressionSettings`
"""

from fedsuite.compression.base import Compressor, Encoded, Identity
from fedsuite.compression.feedback import FeedbackStep, ef21_server_step, ef21_state, ef21_step, ef_state, ef_step
from fedsuite.compression.qsgd import QSGD
from fedsuite.compression.randk import RandK
from fedsuite.compression.registry import COMPRESSORS, CompressionSettings, build_compressor
from fedsuite.compression.sign import ScaledSign
from fedsuite.compression.topk import TopK

__all__ = [
    "COMPRESSORS",
    "QSGD",
    "CompressionSettings",
    "Compressor",
    "Encoded",
    "FeedbackStep",
    "Identity",
    "RandK",
    "ScaledSign",
    "TopK",
    "build_compressor",
    "ef21_server_step",
    "ef21_state",
    "ef21_step",
    "ef_state",
    "ef_step",
]
