"""FedDyn server (docs/algorithms/feddyn.md), in the code form both forms reduce to:
    h_i ← h_i + Δ_i for i ∈ S (h_i = −∇L_i/α_d),   x^{t+1} = mean_S(x_{i,K}) + mean_N(h_i).
With client-held duals the server keeps only Σ_N h_i (the paper's h = −α_d·mean_N h_i, 1/N not 1/S); with
dual_storage='server' it keeps the table h_i (N·d, created lazily) and sends each client its own h_i.
Under relaxed-init the clients start at x_{i,0} = x^t + β(x^t − x_i^last) and also upload x_{i,0} − x^t, so that
mean_S(x_{i,K}) is the mean of their actual last models, as in the FedSpeed authors' simulator
(docs/running/relaxed-init.md).
FedSpeed (docs/algorithms/fedspeed.md) extends this server."""

from __future__ import annotations

import numpy as np

from fedsuite.rules.declared import Table, Vector
from fedsuite.rules.server_rule import Reply, RuleSettings, ServerRule


class FedDyn(ServerRule):
    runs_on_device = True  # its arithmetic runs where its vectors are (fedsuite/rules/vectors.py)

    def __init__(self, settings: RuleSettings, dual_storage: str = "client"):
        self.dual_storage = dual_storage
        self.sends_each = ("h_i",) if dual_storage == "server" else ()
        self.start_shift = ("start_shift",) if settings.relaxed_init else ()
        self.uplink = (*type(self).uplink, *self.start_shift)  # a subclass's own uploads kept (FedSMOO's ν_i)
        super().__init__(settings)

    def state_specs(self):
        return (Vector("h_sum"), Table("h_table")) if self.dual_storage == "server" else (Vector("h_sum"),)

    def client_downlink(self, server_round: int, partition_id: int) -> dict[str, np.ndarray]:
        if self.dual_storage != "server":
            return {}
        return {"h_i": self.h_table.get(partition_id, self.vectors.zeros(self.dim, "float32"))}

    def record_duals(self, replies: list[Reply]) -> None:
        for r in replies:
            self.h_sum += r.arrays["delta"]
            if self.dual_storage == "server":
                self.h_table[r.partition_id] = self.h_table.get(r.partition_id, 0.0) + r.arrays["delta"]

    def local_models_mean(self, replies: list[Reply], name: str = "delta") -> np.ndarray:
        """mean_S of x^t + the named upload, plus each client's start shift under relaxed-init."""
        if not self.start_shift:
            return self.x + self.cohort_mean(replies, name)
        return self.x + self.cohort_mean(replies, lambda r: r.arrays[name] + r.arrays["start_shift"])

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        local_mean = self.local_models_mean(replies)
        self.record_duals(replies)
        return local_mean + self.h_sum / self.num_clients
