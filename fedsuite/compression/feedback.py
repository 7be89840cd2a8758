"""Error feedback as pure state-in, state-out functions: the state is a dict of plain named tensors, so it can be
kept as client state between rounds.

- classic error feedback (Seide et al., 2014; Karimireddy et al., 2019), client state {"compression_error": e}:
  send C(e + x), keep e ← e + x − C(e + x);
- EF21 (Richtárik et al., 2021), client state {"compression_estimate": g_i}: send c_i = C(x − g_i), keep
  g_i ← g_i + c_i; the server keeps g = mean_i g_i by g ← g + (1/n) Σ_i c_i (`ef21_server_step`), and uses g in
  place of the mean of the x_i.

Each step returns what the server reconstructs (`sent`, a dense tensor), the bytes when `encode=True` (the sent
vector is then decoded from them; `Compressor.apply` gives the same tensor without bytes), and the next state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from fedsuite.compression.base import Compressor, Encoded

ERROR = "compression_error"
ESTIMATE = "compression_estimate"


class FeedbackStep(NamedTuple):
    sent: torch.Tensor  # C(·) as the server reconstructs it
    encoded: Encoded | None  # the bytes that travel (encode=True), else None
    state: dict[str, torch.Tensor]  # the client's next state


def compressed(
    compressor: Compressor, v: torch.Tensor, generator: torch.Generator | None, encode: bool
) -> tuple[torch.Tensor, Encoded | None]:
    """C(v) as the server sees it, and its bytes when `encode`."""
    if not encode:
        return compressor.apply(v, generator), None
    encoded = compressor.compress(v, generator)
    return compressor.decompress(encoded, v.numel(), v.device).to(v.dtype), encoded


def ef_state(like: torch.Tensor) -> dict[str, torch.Tensor]:
    """Classic error feedback's first state: no error (zeros shaped, typed and placed like `like`)."""
    return {ERROR: torch.zeros_like(like)}


def ef_step(
    compressor: Compressor,
    x: torch.Tensor,
    state: dict[str, torch.Tensor],
    generator: torch.Generator | None = None,
    *,
    encode: bool = False,
) -> FeedbackStep:
    """Classic error feedback: send C(e + x), keep e + x − C(e + x)."""
    corrected = state[ERROR] + x
    sent, encoded = compressed(compressor, corrected, generator, encode)
    return FeedbackStep(sent, encoded, {ERROR: corrected - sent})


def ef21_state(like: torch.Tensor, start: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """EF21's first client state: g_i = `start` (a copy; zeros when None). The server's first g is the mean of the
    clients' starts (zeros when they start at zero)."""
    estimate = torch.zeros_like(like) if start is None else start.detach().clone().to(like)
    return {ESTIMATE: estimate}


def ef21_step(
    compressor: Compressor,
    x: torch.Tensor,
    state: dict[str, torch.Tensor],
    generator: torch.Generator | None = None,
    *,
    encode: bool = False,
) -> FeedbackStep:
    """EF21 on the client: send c_i = C(x − g_i), keep g_i + c_i."""
    estimate = state[ESTIMATE]
    sent, encoded = compressed(compressor, x - estimate, generator, encode)
    return FeedbackStep(sent, encoded, {ESTIMATE: estimate + sent})


def ef21_server_step(estimate: torch.Tensor, sent: Sequence[torch.Tensor], clients: int) -> torch.Tensor:
    """EF21 on the server: g + (1/n) Σ c_i over the received c_i, n = `clients`, all clients of the federation (a
    client that sent nothing kept its g_i, so g stays the mean of the g_i under partial participation)."""
    if clients < max(1, len(sent)):
        raise ValueError(f"EF21: {len(sent)} messages from a federation of {clients} clients")
    if not sent:
        return estimate.clone()
    return estimate + torch.stack(list(sent)).sum(0) / clients
