"""LoSAC-Prox client (LoSAC paper, eq. 16; docs/algorithms/losac-prox.md): LoSAC's step followed by x ← prox_{η_l Ψ}(x),
Ψ = λ‖x‖₁ or λ‖X‖_* (`prox-penalty`, `prox-lambda`). The server averages the proximal outputs (no server prox)."""

from __future__ import annotations

from .losac import LoSACClient
from .proximal import ProximalStep


class LoSACProxClient(ProximalStep, LoSACClient):
    pass
