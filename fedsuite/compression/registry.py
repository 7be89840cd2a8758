"""The compressors by name, built from a small settings object.

The run-config keys these settings stand for (proposed; not yet in the schema): `compress` (the name), `compress-k`
(top-k and random-k: coordinates kept, 1 ≤ k ≤ d) and `compress-levels` (QSGD's s, 1 ≤ s ≤ 65535).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedsuite.compression.base import Compressor, Identity
from fedsuite.compression.qsgd import QSGD
from fedsuite.compression.randk import RandK
from fedsuite.compression.sign import ScaledSign
from fedsuite.compression.topk import TopK


@dataclass(frozen=True)
class CompressionSettings:
    name: str = "none"  # compress
    k: int = 0  # compress-k (topk, randk)
    levels: int = 15  # compress-levels (qsgd): 15 levels = 5 bits per coordinate


COMPRESSORS: dict[str, Callable[[CompressionSettings], Compressor]] = {
    "none": lambda s: Identity(),
    "topk": lambda s: TopK(s.k),
    "randk": lambda s: RandK(s.k),
    "qsgd": lambda s: QSGD(s.levels),
    "sign": lambda s: ScaledSign(),
}


def build_compressor(settings: CompressionSettings) -> Compressor:
    """The compressor `settings` names; a one-line ValueError naming the key when a setting is not allowed."""
    make = COMPRESSORS.get(settings.name)
    if make is None:
        raise ValueError(f"compress={settings.name!r}: allowed values are {', '.join(COMPRESSORS)}")
    return make(settings)
