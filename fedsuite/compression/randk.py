"""Random-k sparsification: k coordinates drawn uniformly without replacement from a seed both sides know, so only
the k values travel.

The coordinate set is a function of one integer seed: `compress` draws the seed from the generator it is given (a
CPU generator reads it without a device synchronisation), and the k indices are drawn from it on the host (numpy's
PCG64, sampling without replacement in O(k) for k ≪ d), sorted and moved to the vector's device. `Encoded.seed`
records it; in a federation the server derives the same seed from the run's seed, the round and the client, so it is
not counted among the bytes:

    encoded_bytes(d) = 4k    (the k values as float32, in ascending index order)
"""

from __future__ import annotations

import numpy as np
import torch

from fedsuite.compression.base import Compressor, Encoded, Parts, check_dimension, check_whole, need_generator
from fedsuite.compression.bits import ByteReader, float32_bytes, float32_values
from fedsuite.compression.topk import K_KEY, K_MEANING, scatter

SEED_BOUND = 2**62


def draw_seed(generator: torch.Generator) -> int:
    """One integer seed in [0, 2^62) from `generator` (read on the host)."""
    return int(torch.randint(0, SEED_BOUND, (1,), generator=generator, device=generator.device).item())


def random_indices(seed: int, d: int, k: int, device: torch.device) -> torch.Tensor:
    """The k coordinates (ascending) of a d-vector that `seed` chooses, uniformly among the k-subsets."""
    chosen = np.random.Generator(np.random.PCG64(seed)).choice(d, size=k, replace=False, shuffle=False)
    indices = torch.from_numpy(np.sort(chosen).astype(np.int64))
    if device.type == "cuda":  # from pinned memory the copy is queued, not waited for
        return indices.pin_memory().to(device, non_blocking=True)
    return indices.to(device)


class RandK(Compressor):
    """`randk`: k coordinates drawn uniformly at random. Scaled (the default) it sends the values and the server
    multiplies them by d/k: unbiased, E‖C(x) − x‖² = (d/k − 1)‖x‖² exactly, ω = d/k − 1. Unscaled (`scaled=False`,
    for error feedback) it keeps the values as they are: biased, E‖C(x) − x‖² = (1 − k/d)‖x‖², ω = 1 − k/d."""

    name = "randk"

    def __init__(self, k: int, scaled: bool = True):
        self.k = check_whole(K_KEY, k, 1, None, K_MEANING)
        self.scaled = bool(scaled)
        self.unbiased = self.scaled

    def _k_for(self, d: int) -> int:
        return check_whole(K_KEY, self.k, 1, check_dimension(d), K_MEANING)

    def encoded_bytes(self, d: int) -> int:
        return 4 * self._k_for(d)

    def omega(self, d: int) -> float:
        k = self._k_for(d)
        return d / k - 1.0 if self.scaled else 1.0 - k / d

    def parts(self, x: torch.Tensor, generator: torch.Generator | None) -> Parts:
        seed = draw_seed(need_generator(self.name, generator))
        indices = random_indices(seed, x.numel(), self.k, x.device)
        return {"seed": seed, "indices": indices, "values": x[indices]}

    def pack(self, parts: Parts, d: int) -> bytes:
        return float32_bytes(parts["values"])

    def unpack(self, encoded: Encoded, d: int, device: torch.device) -> Parts:
        if encoded.seed is None:
            raise ValueError("randk: the encoded vector carries no seed for its coordinates")
        reader = ByteReader(encoded.data)
        values = float32_values(reader.take(4 * self._k_for(d)), device)
        reader.done()
        return {"seed": encoded.seed, "indices": random_indices(encoded.seed, d, self.k, device), "values": values}

    def expand(self, parts: Parts, d: int) -> torch.Tensor:
        values = parts["values"]
        if self.scaled:
            values = values * (d / self.k)
        return scatter(parts["indices"], values, d)

    def __repr__(self) -> str:
        return f"RandK(k={self.k}, scaled={self.scaled})"
