"""FedDyn server (docs/algorithms/feddyn.md), in the code form both forms reduce to:
    h_i ← h_i + Δ_i for i ∈ S (h_i = −∇L_i/α_d),   x^{t+1} = mean_S(x_{i,K}) + mean_N(h_i).
With client-held duals the server keeps only Σ_N h_i (the paper's h = −α_d·mean_N h_i, 1/N not 1/S); with
dual_storage='server' it keeps the table h_i (N·d, created lazily) and sends each client its own h_i.
FedSpeed (docs/algorithms/fedspeed.md) extends this server."""

from __future__ import annotations

import numpy as np

from fedsuite.declared import Table, Vector
from fedsuite.rule import Reply, RuleSettings, ServerRule


class FedDyn(ServerRule):
    def __init__(self, settings: RuleSettings, dual_storage: str = "client"):
        self.dual_storage = dual_storage
        self.sends_each = ("h_i",) if dual_storage == "server" else ()
        super().__init__(settings)
        self._zero = np.zeros(self.dim, np.float32)

    def state_specs(self):
        return (Vector("h_sum"), Table("h_table")) if self.dual_storage == "server" else (Vector("h_sum"),)

    def client_downlink(self, server_round: int, partition_id: int) -> dict[str, np.ndarray]:
        if self.dual_storage != "server":
            return {}
        return {"h_i": self.h_table.get(partition_id, self._zero)}

    def record_duals(self, replies: list[Reply]) -> None:
        for r in replies:
            self.h_sum += r.arrays["delta"]
            if self.dual_storage == "server":
                self.h_table[r.partition_id] = self.h_table.get(r.partition_id, 0.0) + r.arrays["delta"]

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        local_mean = self.x + self.cohort_mean(replies, "delta")
        self.record_duals(replies)
        return local_mean + self.h_sum / self.num_clients
