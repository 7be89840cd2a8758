"""Where every differential-privacy noise value comes from (docs/privacy.md, Secret noise): the server's noise on the
cohort's sum, the clients' noise shares, adaptive clipping's count noise and DP-SGD's per-step noise all draw from a
stream made here.

- `secure` (the default): each stream is keyed by fresh bits from the operating system's entropy (`secrets`), held
  only in this process's memory and never written anywhere (not in config.json, rows, checkpoints or logs). Nobody
  who holds the run config and the released models can recompute the noise and subtract it, and two runs of one
  config draw different noise.
- `seeded`: each stream is a function of the run seed, the round and the stream's place (and, for a client, its
  node's `dp-noise-secret`). Two runs of one config draw the same noise and end on the same model, which is what a
  reproducible study needs; but the run seed is in config.json, so the run is **not private**: it says so on the
  console, in summary.json and in every row.

NumPy streams take 128 secret bits (PCG64's state); torch's generators take a 64-bit seed, which is what a DP-SGD
stream gets.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

import numpy as np
import torch

SECURE, SEEDED = "secure", "seeded"
SOURCES = (SECURE, SEEDED)
NOT_PRIVATE = "not private: dp-noise-source='seeded' draws the DP noise from the run seed, which config.json records"

log = logging.getLogger("flwr.fedsuite")


def numpy_stream(source: str, structure: Sequence[int]) -> np.random.Generator:
    """A NumPy generator for one noise stream: keyed by 128 fresh secret bits (`secure`), or by `structure` alone
    (`seeded`: the run seed, round, partition … of the caller)."""
    if source == SEEDED:
        return np.random.default_rng([int(v) for v in structure])
    if source != SECURE:
        raise ValueError(f"dp-noise-source={source!r}: allowed values are {', '.join(SOURCES)}")
    return np.random.default_rng(secrets.randbits(128))


def torch_stream(source: str, seeded_seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on `device` for one noise stream: seeded by 64 fresh secret bits (`secure`), or by
    `seeded_seed` (`seeded`)."""
    if source == SEEDED:
        seed = int(seeded_seed)
    elif source == SECURE:
        seed = secrets.randbits(64)
    else:
        raise ValueError(f"dp-noise-source={source!r}: allowed values are {', '.join(SOURCES)}")
    return torch.Generator(device=device).manual_seed(seed)


def private(source: str) -> bool:
    """Whether noise from `source` is secret: False for `seeded`."""
    return source != SEEDED


def warn_if_seeded(run_config) -> None:
    """One warning line when a run's DP mechanism (client-level DP or DP-SGD) draws seeded noise."""
    on = run_config["dp"] != "off" or run_config["dp-sgd"]
    if on and run_config["dp-noise-source"] == SEEDED:
        log.warning("dp-noise-source='seeded': the DP noise is drawn from the run seed; anyone holding config.json "
                    "and the released models can subtract it, so this run is NOT private (reproducible studies "
                    "only; docs/privacy.md)")  # fmt: skip
