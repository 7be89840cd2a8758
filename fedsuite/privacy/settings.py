"""The typed settings of privacy (fedsuite/config/settings.py): client-level DP of what clients upload
(docs/privacy.md) and
sample-level DP inside their local steps (docs/privacy-dp-sgd.md). fedsuite.config.run_config.Config carries them as
`cfg.privacy` and `cfg.sample_privacy`; the privacy checks read them from a check's values."""

from __future__ import annotations

from dataclasses import dataclass

from fedsuite.config.settings import Settings, setting


@dataclass(frozen=True)
class ClientPrivacy(Settings):
    """Client-level differential privacy of what clients upload (docs/privacy.md; fedsuite/privacy).

    mode (dp): 'off', 'server' (noise added by the server) or 'clients' (each client adds its share).
    noise (dp-noise): σ, the noise multiplier.
    clip (dp-clip): C, the joint L2 clip of a client's uploads (adaptive: the first round's C).
    clip_mode (dp-clip-mode): 'fixed' or 'adaptive'.
    quantile (dp-clip-quantile): adaptive clipping's target share of unclipped clients.
    clip_lr (dp-clip-lr): adaptive clipping's η_C.
    count_noise (dp-count-noise): adaptive clipping's σ_b (0: clients-per-round / 20).
    delta (dp-delta): the δ of the reported (ε, δ).
    target_epsilon (dp-target-epsilon): stop before a round that would exceed it; 0 = none.
    noise_source (dp-noise-source): 'secure' (secret noise) or 'seeded' (reproducible, not private).
    per_record (dp-sgd-per-record): how the records' gradients are clipped, 'vmap' or 'ghost'
    (fedsuite/privacy/per_record.py).
    """

    mode: str = setting("dp")
    noise: float = setting("dp-noise")
    clip: float = setting("dp-clip")
    clip_mode: str = setting("dp-clip-mode")
    quantile: float = setting("dp-clip-quantile")
    clip_lr: float = setting("dp-clip-lr")
    count_noise: float = setting("dp-count-noise")
    delta: float = setting("dp-delta")
    target_epsilon: float = setting("dp-target-epsilon")
    noise_source: str = setting("dp-noise-source")
    per_record: str = setting("dp-sgd-per-record")

    @property
    def on(self) -> bool:
        return self.mode != "off"


@dataclass(frozen=True)
class SampleLevelPrivacy(Settings):
    """Sample-level differential privacy: DP-SGD inside every client's local steps (fedsuite/privacy/dp_sgd.py,
    docs/privacy-dp-sgd.md).

    enabled (dp-sgd): every local step's gradient is private.
    noise (dp-sgd-noise): σ_s, the noise multiplier on the sum of clipped per-record gradients.
    clip (dp-sgd-clip): C_s, the L2 norm every per-record gradient is clipped to.
    delta (dp-delta): δ of the ε(δ) each client reports.
    target_epsilon (dp-target-epsilon): a client stops training in a round that would take its ε above it; 0 = none.
    noise_source (dp-noise-source): 'secure' (secret noise) or 'seeded' (reproducible, not private).
    per_record (dp-sgd-per-record): how the records' gradients are clipped, 'vmap' or 'ghost'
    (fedsuite/privacy/per_record.py).
    """

    enabled: bool = setting("dp-sgd")
    noise: float = setting("dp-sgd-noise")
    clip: float = setting("dp-sgd-clip")
    delta: float = setting("dp-delta")
    target_epsilon: float = setting("dp-target-epsilon")
    noise_source: str = setting("dp-noise-source")
    per_record: str = setting("dp-sgd-per-record")
