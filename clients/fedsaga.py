"""FedSaga client (LoSAC paper, Alg. 1, eq. 9; docs/algorithms/fedsaga.md): LoSAC's loop with the local table only,
    x ← x − η_l·(G_j(x) − y_{i,j} + φ̃_i),    φ̃_i ← φ̃_i + (G_j(x) − y_{i,j})/M,    y_{i,j} ← G_j(x),
φ̃_i = mean_j y_{i,j} (recomputed from the persistent table at the start of the round). Uplink Δx_i; the server is
FedAvg's. No global estimate reaches the client, so client drift is not corrected (the paper shows it worse than
FedAvg on non-IID data).
"""

from __future__ import annotations

import torch

from fedsuite.local.loop import UpdateRule
from fedsuite.local.variance import BlockTable

from .losac import LoSACClient


class FedSagaClient(LoSACClient):
    def rule(self, ctx) -> UpdateRule:
        table = self.table()
        return UpdateRule(clipped=(BlockTable(table, torch.stack(table).mean(0), scale=1.0),), batches=self.blocks())

    def uplink(self, result, rule, ctx):
        return {"delta": result.x - result.x0}
