"""Secure aggregation with Flower's SecAgg+ (docs/privacy-secagg.md): its settings from the run config, the one-line
refusals of run configs it cannot serve, and its arithmetic without the protocol.

What SecAgg+ does to the numbers (Flower's `secaggplus_mod` on each client, `SecAggPlusWorkflow` on the server):
each client scales its upload by its weight w_i = n_i / max_weight (here every client reports n_i = 1 and
max_weight is 1, so w_i = 1 exactly), clips every value to [−r, r], maps it to [0, T] and rounds it stochastically
to an integer, adds masks that cancel in the sum modulo M = 2**32; the server sums modulo M, removes what is left
of the masks and maps the integer sum back: Σ_i clip(w_i·u_i) / Σ_i w_i, the cohort's mean of each array.
`secure_mean` does the same with the same functions and the same rounding draws, minus the masks (they cancel
exactly in integer arithmetic), so the in-process engine reproduces a real SecAgg+ round bit for bit.

The stochastic rounding draws come from NumPy's global generator; fedsuite seeds it on the client just before the
mod quantises (`rounding_seed`: run seed, round, partition and the node's secret), so a simulation is
reproducible and a node with a secret keeps its draws from the server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsuite.config.groups import uplink_compressor
from fedsuite.config.settings import Settings, setting, value_of

MAX_WEIGHT = 1.0  # every client reports one example (weighting='uniform'): w_i = 1, no scaling before quantisation
MODULUS = 2**32  # Flower's default modulus range: the masks and the integer sum live modulo this
_ROUNDING = 0x5EC0A66  # separates the rounding draws' seed from every other stream of the run seed


@dataclass(frozen=True)
class SecAggSettings(Settings):
    """Secure aggregation's keys, typed settings (fedsuite/config/settings.py); without the keys, off.

    on (secagg): the cohort's uploads are summed with SecAgg+.
    shares (secagg-shares): the neighbours each client's secrets are shared among; 0 = the whole cohort.
    threshold (secagg-threshold): the shares that reconstruct a secret; 0 = two thirds of the shares, at least 2.
    clip_range (secagg-clip-range): r, every uploaded value is clipped to [−r, r].
    quantization (secagg-quantization): T, the integer levels over [−r, r].
    """

    on: bool = setting("secagg")
    shares: int = setting("secagg-shares")
    threshold: int = setting("secagg-threshold")
    clip_range: float = setting("secagg-clip-range")
    quantization: int = setting("secagg-quantization")

    @property
    def step(self) -> float:
        """δ = 2r/T: one quantisation level."""
        return 2 * self.clip_range / self.quantization

    def bound(self) -> float:
        """How far the secure mean can lie from the exact mean of float32 uploads within [−r, r], per coordinate:
        one level δ (stochastic rounding of each client's value, so of their mean) plus half a float32 ulp of 2r
        (the client adds r to its float32 value before scaling)."""
        return self.step + float(np.spacing(np.float32(2 * self.clip_range))) / 2

    def reconstruction_threshold(self, cohort: int) -> int:
        """The shares SecAggPlusWorkflow needs to unmask a cohort of `cohort` clients (at least 2)."""
        shares = self.shares or cohort
        return self.threshold or max(round(2 / 3 * shares), 2)

    def workflow_args(self) -> tuple[tuple[int | float, int | float], dict[str, Any]]:
        """The arguments of Flower's SecAggPlusWorkflow: (num_shares, reconstruction_threshold) and the keywords."""
        shares: int | float = self.shares if self.shares else 1.0  # 1.0: every sampled client
        threshold: int | float = self.threshold if self.threshold else 2 / 3  # a share of num_shares, at least 2
        keywords = {"max_weight": MAX_WEIGHT, "clipping_range": self.clip_range,
                    "quantization_range": self.quantization, "modulus_range": MODULUS}  # fmt: skip
        return (shares, threshold), keywords


def secagg_errors(values: Mapping[str, Any], refusal: str = "") -> list[str]:
    """The problems of `values` (validated run-config values) under secagg=true; `refusal`: why the chosen algorithm
    cannot aggregate from sums ('' = it can)."""
    v = values
    if not SecAggSettings.from_values(v).on:
        return []
    errors = []
    if refusal:
        errors.append(f"secagg=true: algorithm={v['algorithm']!r} {refusal}")
    errors += _compression_errors(v)
    if v.get("client-mapping") != "fixed":
        errors.append("secagg=true needs client-mapping='fixed': a SuperNode takes part in SecAgg+ once per round, "
                      "so it cannot carry several partitions")  # fmt: skip
    if v.get("weighting") == "samples":
        errors.append("secagg=true needs weighting='uniform': SecAgg+ would weight by the reported data sizes, which "
                      "the server sees in the clear, and lose precision to the scaling")  # fmt: skip
    if v.get("sampling") == "bernoulli":
        errors.append("secagg=true needs sampling='fixed': a Bernoulli cohort can have fewer than the two clients "
                      "(or the reconstruction threshold) SecAgg+ needs")  # fmt: skip
    if v.get("dp") != "off" and v.get("dp-clip-mode") == "adaptive":
        errors.append("secagg=true with dp-clip-mode='adaptive': each client's clip bit travels as a metric, outside "
                      "the secure sum; use dp-clip-mode='fixed'")  # fmt: skip
    needed = ("clients-per-round", "secagg-shares", "secagg-threshold", "secagg-quantization")
    if any(key not in v for key in needed) or v.get("sampling") == "bernoulli":
        return errors
    cohort, shares, threshold = int(v["clients-per-round"]), int(v["secagg-shares"]), int(v["secagg-threshold"])
    if cohort < 2:
        errors.append(f"secagg=true needs clients-per-round >= 2 (it is {cohort}): SecAgg+ sums at least two uploads")
    if shares and (shares < 3 or shares > cohort or shares % 2 == 0):
        errors.append(
            f"secagg-shares={shares}: must be 0 (the whole cohort) or odd, from 3 to clients-per-round={cohort}"
        )
    if threshold == 1:
        errors.append("secagg-threshold=1: must be 0 (two thirds of the shares) or at least 2")
    elif threshold > cohort:
        errors.append(f"secagg-threshold={threshold}: more than clients-per-round={cohort}, so no round could "
                      "reconstruct the masks; lower it (0 = two thirds of the shares)")  # fmt: skip
    elif shares and threshold >= shares:
        errors.append(f"secagg-threshold={threshold}: must be fewer than secagg-shares={shares}")
    if cohort * int(v["secagg-quantization"]) >= MODULUS:
        most = (MODULUS - 1) // cohort
        errors.append(f"secagg-quantization={v['secagg-quantization']}: clients-per-round × levels must stay below "
                      f"2**32, the masks' modulus (at most {most} for {cohort} clients)")  # fmt: skip
    return errors


def _compression_errors(v: Mapping[str, Any]) -> list[str]:
    """The uplink compression SecAgg+ cannot sum: every compressor but random-k with a common mask, whose clients
    all send the values of the same k coordinates (docs/privacy-secagg.md#compressed-uploads)."""
    compressor = uplink_compressor(v)
    if compressor not in ("none", "randk"):
        return [f"compress-up={compressor!r} with secagg=true: SecAgg+ sums masked vectors of one layout, which only "
                "random-k with a common mask keeps; use compress-up='none' or compress-up='randk' with "
                "compress-up-mask='common'"]  # fmt: skip
    if compressor == "randk" and (mask := str(value_of(v, "compress-up-mask"))) != "common":
        return [f"compress-up-mask={mask!r} with compress-up='randk' and secagg=true: each client's own coordinates "
                "cannot be summed inside SecAgg+; use compress-up-mask='common' (every client of a round sends the "
                "same k coordinates)"]  # fmt: skip
    return []


def rounding_seed(seed: int, server_round: int, partition_id: int, secret: int = 0) -> list[int]:
    """The 32-bit words that seed a client's stochastic rounding draws this round (NumPy's legacy seeding)."""
    words = [_ROUNDING, int(seed) % 2**32, int(seed) // 2**32 % 2**32, int(server_round), int(partition_id)]
    while secret:
        words.append(secret % 2**32)
        secret //= 2**32
    return words


def quantize_upload(arrays: Sequence[np.ndarray], num_examples: int, settings: SecAggSettings,
                    seed: Sequence[int]) -> list[np.ndarray]:  # fmt: skip
    """What Flower's secaggplus_mod sends before masking: [q_ratio] + the quantised weighted arrays, the rounding
    drawn from NumPy's global generator seeded with `seed` (its state is restored afterwards)."""
    from flwr.common.secure_aggregation.ndarrays_arithmetic import factor_combine, parameters_multiply
    from flwr.common.secure_aggregation.quantization import quantize

    q_ratio = round(num_examples / MAX_WEIGHT * settings.quantization)
    scaled = parameters_multiply(list(arrays), q_ratio / settings.quantization)
    saved = np.random.get_state()
    try:
        np.random.seed(list(seed))
        return factor_combine(q_ratio, quantize(scaled, settings.clip_range, settings.quantization))
    finally:
        np.random.set_state(saved)


def secure_mean(quantized: Sequence[Sequence[np.ndarray]], settings: SecAggSettings) -> list[np.ndarray]:
    """The cohort's weighted mean from the clients' quantised uploads (`quantize_upload`), as SecAggPlusWorkflow's
    unmask stage computes it from the masked ones: the sum modulo 2**32, the weight total taken out, dequantised,
    shifted back by (n − 1)·r and divided by the total weight."""
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_extract,
        parameters_addition,
        parameters_mod,
    )
    from flwr.common.secure_aggregation.quantization import dequantize

    total = [np.asarray(a, np.int64) for a in quantized[0]]  # the masked vectors are int64 on the wire
    for upload in quantized[1:]:
        total = parameters_addition(total, [np.asarray(a, np.int64) for a in upload])
    total = parameters_mod(total, MODULUS)
    q_total, integers = factor_extract(total)
    inverse_total = settings.quantization / q_total
    mean = dequantize(integers, settings.clip_range, settings.quantization)
    offset = -(len(quantized) - 1) * settings.clip_range
    for vector in mean:
        vector += offset
        vector *= inverse_total
    return mean
