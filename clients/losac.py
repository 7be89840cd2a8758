"""LoSAC client (LoSAC paper, Alg. 2, eqs. 10–12; docs/algorithms/losac.md, scale-consistent form).

Each local step trains on one of the client's M fixed data blocks j (`FixedBlocks`):
    x ← x − η_l·(G_j(x) + ϕ_i/N − y_{i,j}),    ϕ_i ← ϕ_i + (G_j(x) − y_{i,j})/M,    y_{i,j} ← G_j(x)
(`BlockTable`), starting from ϕ_i = ϕ^t, the server's estimate of Σ_n ḡ_n. The block table y_{i,1..M} (M·d) is
persistent client state, zeros at first. Uplink Δx_i = x_{i,K} − x^t and Δϕ_i = ϕ_i − ϕ^t, the change of this
client's table mean ḡ_i (eq. 12), accumulated separately so it is not the difference of two large numbers.
"""

from __future__ import annotations

import torch

from fedsuite.local.loop import UpdateRule
from fedsuite.local.variance import DELTA_PHI, BlockTable
from fedsuite.rules.client_rule import ClientRule
from fedsuite.rules.declared import Vector


def table_names(num_blocks: int) -> list[str]:
    return [f"y_{j}" for j in range(num_blocks)]


class LoSACClient(ClientRule):
    @classmethod
    def state_specs(cls, cfg):
        return tuple(Vector(name, "float32") for name in table_names(cfg.local.blocks))  # the table y_{i,1..M}

    def table(self) -> list[torch.Tensor]:
        """y_{i,1..M}, the live state tensors (updated in place by the step)."""
        return [self.state.get(name) for name in table_names(self.node.cfg.local.blocks)]

    def rule(self, ctx) -> UpdateRule:
        table = BlockTable(self.table(), ctx.down["phi"].clone(), scale=float(self.node.num_partitions))
        return UpdateRule(clipped=(table,), batches=self.blocks(), parts={"table": table})

    def uplink(self, result, rule, ctx):
        return {"delta": result.x - result.x0, DELTA_PHI: rule.parts["table"].change}
