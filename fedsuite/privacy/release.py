"""What a client releases under client-level DP (docs/privacy.md): every vector of its upload clipped jointly to
the round's C, and, with dp='clients', its share of the round's Gaussian noise, so that the cohort's sum carries
noise of std σ·C. The client's own persistent state is computed before this and never leaves the client, so it is
not clipped.

The fit config carries the round's C (`CLIP_KEY`, which adaptive clipping moves) and the cohort size the noise
shares are sized to (`COHORT_KEY`). `ClientLevelRelease` is the client stage (fedsuite/stages/client.py) that
releases every upload this way, without the training losses and with an example count of 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from fedsuite.privacy.checks import count_noise
from fedsuite.privacy.model_checks import averaged_buffers_refusal
from fedsuite.privacy.noise import SECURE, numpy_stream
from fedsuite.rules.declared import BUFFERS
from fedsuite.stages.client import ClientStage, without_losses

CLIP_KEY = "dp-clip-now"  # the round's clip C_t, set by the server
COHORT_KEY = "dp-cohort"  # the number of clients sampled this round (the noise shares are sized to it)
BELOW_CLIP = "dp-below-clip"  # adaptive clipping: 1 if the upload's norm was at most C_t (plus a noise share)


def update_noise(sigma: float, adaptive: bool, count_noise: float) -> float:
    """The noise multiplier of the uploads: σ itself, or with adaptive clipping the part of σ left once the count of
    unclipped clients took its share, (σ⁻² − (2σ_b)⁻²)^(-1/2) (Andrew et al., 2021)."""
    if not adaptive or sigma == 0:
        return sigma
    return (sigma**-2 - (2 * count_noise) ** -2) ** -0.5


def joint_norm(arrays: Mapping[str, torch.Tensor]) -> float:
    """The L2 norm of all arrays taken as one vector (float64 sum of squares)."""
    return math.sqrt(sum(float(torch.sum(a.double() ** 2)) for a in arrays.values()))


def clip_jointly(arrays: Mapping[str, torch.Tensor], clip: float) -> tuple[dict[str, torch.Tensor], float]:
    """Every array scaled by min(1, C/‖all arrays‖); returns them and the norm before clipping (which stays on the
    client: only whether it was below C is released, for adaptive clipping)."""
    norm = joint_norm(arrays)
    factor = min(1.0, clip / norm) if norm > 0 else 1.0
    return {name: a * factor for name, a in arrays.items()}, norm


def noise_generator(
    seed: int, server_round: int, partition_id: int, secret: int = 0, source: str = SECURE
) -> np.random.Generator:
    """The client's noise stream for a round (fedsuite/privacy/noise.py): keyed by fresh secret bits from the OS
    (`source='secure'`), or with `source='seeded'` from the run seed (reproducible studies, not private) and the
    node's secret (a deployment's node config `dp-noise-secret`, unknown to the server)."""
    return numpy_stream(source, [seed, server_round, partition_id, 0xD9, secret])


def add_noise_share(
    arrays: Mapping[str, torch.Tensor], std: float, generator: np.random.Generator
) -> dict[str, torch.Tensor]:
    """Each array plus Gaussian noise of std `std` per coordinate (the client's share: σ·C/√cohort); std 0 adds
    nothing (so σ = 0 leaves every bit as it was)."""
    if std == 0:
        return dict(arrays)
    out = {}
    for name, a in arrays.items():
        noise = torch.from_numpy(generator.normal(0.0, std, size=tuple(a.shape)))
        out[name] = a + noise.to(device=a.device, dtype=a.dtype)
    return out


def client_release(
    uplink: Mapping[str, torch.Tensor],
    privacy,  # the run's fedsuite.config.run_config.ClientPrivacy
    clip: float,
    cohort: int,
    count_noise: float,
    generator: np.random.Generator,
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The arrays a client sends under client-level DP, and the metrics that go with them: jointly clipped to C_t;
    with dp='clients' plus the client's noise share; with adaptive clipping the bit "norm ≤ C_t" (with dp='clients'
    plus its share of the count's noise, std σ_b/√cohort)."""
    released, norm = clip_jointly(uplink, clip)
    adaptive = privacy.clip_mode == "adaptive"
    metrics: dict[str, float] = {}
    if adaptive:
        metrics[BELOW_CLIP] = 1.0 if norm <= clip else 0.0
    if privacy.mode == "clients":
        share = 1.0 / math.sqrt(cohort)
        released = add_noise_share(
            released, update_noise(privacy.noise, adaptive, count_noise) * clip * share, generator
        )
        if adaptive:
            metrics[BELOW_CLIP] += float(generator.normal(0.0, count_noise * share))
    return released, metrics


class ClientLevelRelease(ClientStage):
    """Client-level DP on the client's side of a round (docs/privacy.md): only the clipped (with dp='clients', noised)
    upload leaves, with adaptive clipping's bit; no training loss (the noise covers the arrays only) and an example
    count of 1 (no data size)."""

    config_keys = frozenset({CLIP_KEY, COHORT_KEY})

    def __init__(self, privacy, seed: int, count_noise: float):
        """`privacy`: the run's fedsuite.config.run_config.ClientPrivacy; `count_noise`: σ_b of adaptive clipping."""
        self.privacy, self.seed, self.count_noise = privacy, seed, count_noise

    @classmethod
    def of_run(cls, cfg) -> ClientLevelRelease | None:
        """The stage of a resolved run config (fedsuite.config.run_config.Config), or None with dp='off'."""
        return cls(cfg.privacy, cfg.seed, count_noise(cfg)) if cfg.privacy.on else None

    def release(self, uplink, fit, node):
        """The upload as `client_release` makes it, with the round's C and cohort from the fit config and the node's
        noise stream; the model's buffers are refused, as they would leave without clip or noise."""
        if BUFFERS.name in uplink:
            raise ValueError(averaged_buffers_refusal(self.privacy.mode, node.cfg.model))
        generator = noise_generator(
            self.seed, fit.ctx.round, node.partition_id, getattr(node, "noise_secret", 0), self.privacy.noise_source
        )
        return client_release(
            uplink, self.privacy, float(fit.config[CLIP_KEY]), int(fit.config[COHORT_KEY]), self.count_noise, generator
        )

    def metrics(self, metrics, fit):
        return without_losses(metrics)

    def num_examples(self, n: int) -> int:
        return 1
