"""SCAFFOLD-Prox client (LoSAC paper §V-E; docs/algorithms/scaffold-prox.md): SCAFFOLD's corrected step
followed by the same proximal step as LoSAC-Prox, x ← prox_{η_l Ψ}(x); control variates as SCAFFOLD's."""

from __future__ import annotations

from .proximal import ProximalStep
from .scaffold import ScaffoldClient


class ScaffoldProxClient(ProximalStep, ScaffoldClient):
    pass
