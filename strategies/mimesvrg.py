"""MimeSVRG server (ALGORITHMS.md §4.8): a round with two exchanges, inside Flower's Strategy API.

Phase A (in `configure_fit`, before the fit instructions are built): the sampled clients' proxies are asked,
in parallel, for ∇F_i(x^t) (a fit message with `phase = GRADIENT_PHASE`, see `clients.mimesvrg`); the valid
answers give c = mean_S(∇F_i(x^t)) (uniform, or by n_i with weighting='samples' as fedjax does). Phase B: the
ordinary fit exchange with (x^t, c); x^{t+1} = x^t + η_g·mean_S(Δ_i). A client that fails or is rejected in
phase A gets no phase-B instruction and counts as a failure of the round (as does one failing phase B).
Both exchanges are in the round's figures: +1 d down (x) and +1 d up (the gradient) per client, the phase-A
compute time, and the round's wall time. `last_query` keeps (round, x^t, {partition: ∇F_i(x^t)}) for the DLG
study. Hyper-parameters: server-lr η_g = 1.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from flwr.common import Code, FitIns, ndarrays_to_parameters, parameters_to_ndarrays

from clients.mimesvrg import GRADIENT_NAME, GRADIENT_PHASE, PHASE_KEY
from fedsuite.payload import ARRAYS_KEY, PARTITION_KEY, pack, unpack
from strategies.base import FedStrategy, Reply, RunPlan, log


class MimeSVRG(FedStrategy):
    not_state = ("_query_seconds",)  # phase-A timing of the round in progress, not algorithm state (checkpoints)

    def __init__(self, plan: RunPlan, server_lr: float = 1.0):
        super().__init__(plan)
        self.server_lr = server_lr
        self.c = np.zeros(self.dim, np.float64)
        self.last_query: tuple[int, np.ndarray, dict[int, np.ndarray]] | None = None
        self._query_seconds = 0.0

    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        return {"c": self.c}

    def gradient_query(self, server_round: int, proxies: dict) -> dict[int, tuple[np.ndarray, int, float]]:
        """Phase A: {partition: (∇F_i(x^t), n_i, compute seconds)} of the clients whose answer is valid."""
        arrays, names = pack({"model": self.x})
        params = ndarrays_to_parameters(arrays)
        config = {"round": server_round, PHASE_KEY: GRADIENT_PHASE, ARRAYS_KEY: names}

        def ask(pid):
            try:
                res = proxies[pid].fit(FitIns(params, {**config, PARTITION_KEY: pid}), None, server_round)
                if "error" in res.metrics:  # the client's own failure, as clients/base.py reports it
                    raise ValueError(str(res.metrics["error"]))
                if res.status.code != Code.OK or int(res.metrics.get("partition-id", -1)) != pid:
                    raise ValueError(f"status {res.status.code}, partition-id {res.metrics.get('partition-id')}")
                grad = unpack(parameters_to_ndarrays(res.parameters), str(res.metrics.get(ARRAYS_KEY, "")))
                grad = grad.get(GRADIENT_NAME)
                if grad is None or grad.shape != (self.dim,) or not np.all(np.isfinite(grad)) or res.num_examples <= 0:
                    raise ValueError(f"{GRADIENT_NAME} missing, of the wrong shape or not finite")
                return pid, (grad.astype(np.float64), int(res.num_examples), float(res.metrics["compute-seconds"]))
            except Exception as err:  # a failed query is a failure of this client's round, never of the run
                log.warning("round %d: gradient query to partition %d failed: %s", server_round, pid, err)
                return pid, None

        with ThreadPoolExecutor(max_workers=self.plan.query_workers) as pool:
            answers = dict(pool.map(ask, sorted(proxies)))
        return {pid: a for pid, a in answers.items() if a is not None}

    def configure_fit(self, server_round, parameters, client_manager):
        started = time.perf_counter()
        nodes = self._route(self.plan.sampler.cohort(server_round), client_manager)
        cohort = sorted(nodes)
        answers = self.gradient_query(server_round, {pid: nodes[pid] for pid in cohort})
        self.last_query = (server_round, self.x.copy(), {pid: a[0] for pid, a in answers.items()})
        if answers:
            w = np.array([a[1] if self.plan.weighting == "samples" else 1.0 for a in answers.values()])
            self.c = sum(wi * a[0] for wi, a in zip(w / w.sum(), answers.values(), strict=True))
        instructions = super().configure_fit(server_round, parameters, client_manager)
        self._round_started[server_round] = started  # the round's wall time includes phase A
        dropped = set(cohort) - set(answers)
        self._expected -= dropped
        kept = [(proxy, ins) for proxy, ins in instructions if int(ins.config[PARTITION_KEY]) not in dropped]
        stats = self._round_stats[server_round]
        stats["missing"] += len(dropped)
        stats["vectors_down_per_client"] += 1  # phase A sent x
        stats["bytes_down_per_client"] += 4 * self.dim
        self._query_seconds = sum(a[2] for a in answers.values())
        return kept

    def aggregate_fit(self, server_round, results, failures):
        out = super().aggregate_fit(server_round, results, failures)
        stats = self._round_stats[server_round]
        if stats.get("replies"):
            stats["vectors_up_per_client"] += 1  # phase A uploaded ∇F_i(x^t)
            stats["bytes_up_per_client"] += 4 * self.dim
        stats["client_compute_seconds"] += self._query_seconds
        return out

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        return self.x + self.server_lr * self.displacement(replies)
