"""Compression of what a round sends, without Flower: the compressors (top-k, random-k, QSGD, scaled sign, none)
behind one interface (`base.Compressor`), the bit packing their bytes use, error feedback (classic and EF21) as
state-in, state-out functions, and the registry that builds a compressor from its settings."""

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
