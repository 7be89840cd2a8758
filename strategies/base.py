"""The server half every algorithm shares, on Flower's legacy `Strategy` API.

Plumbing lives here: partition-id → node discovery, seeded cohorts, payload encode/decode, validation of
client replies (rejected and logged, never averaged in), communication accounting, centralised evaluation
and the results rows. An algorithm subclass only says what it keeps (`__init__`), what it sends
(`downlink`, `fit_config`), what it expects back (`uplink_names`) and how replies become the new model
(`aggregate`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.common import (
    EvaluateRes,
    FitIns,
    FitRes,
    GetPropertiesIns,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from fedsuite.payload import ARRAYS_KEY, PayloadError, nbytes, pack, unpack
from fedsuite.results import RunRecorder
from fedsuite.sampling import Sampler

log = logging.getLogger("flwr.fedsuite")


class FederationError(RuntimeError):
    """The connected SuperNodes do not form the federation the run config describes."""


@dataclass
class RunPlan:
    """What the shared plumbing needs, built from the run config by fedsuite.server_app."""

    initial_x: np.ndarray
    sampler: Sampler
    num_rounds: int
    lr: float  # η_l^0
    lr_decay: float  # γ: η_l^t = η_l^0 γ^t (§2.6)
    weighting: str = "uniform"  # or "samples" (§0.3.3)
    eval_every: int = 1
    evaluate: Callable[[np.ndarray], dict[str, Any]] | None = None
    recorder: RunRecorder | None = None
    node_wait_seconds: float = 600.0


@dataclass
class Reply:
    """One validated client reply."""

    partition_id: int
    num_examples: int
    steps: int  # K_i actually taken
    lr: float  # η_l the client used this round
    arrays: dict[str, np.ndarray]  # float64 copies for aggregation
    metrics: dict[str, Scalar] = field(default_factory=dict)
    uplink_bytes: int = 0  # as received


class FedStrategy(Strategy):
    uplink_names: tuple[str, ...] = ("delta",)

    def __init__(self, plan: RunPlan):
        super().__init__()
        self.plan = plan
        self.x = np.asarray(plan.initial_x, dtype=np.float32).copy()
        self.dim = self.x.size
        self._node_of: dict[int, ClientProxy] = {}
        self._round_started: dict[int, float] = {}
        self._round_stats: dict[int, dict[str, Any]] = {}

    # ---- algorithm hooks -------------------------------------------------------------------------
    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        """Named extra d-vectors sent beside the model to every sampled client."""
        return {}

    def client_downlink(self, server_round: int, partition_id: int) -> dict[str, np.ndarray]:
        """Named extra d-vectors for one client only (e.g. a server-side mirror of its dual)."""
        return {}

    def fit_config(self, server_round: int) -> dict[str, Scalar]:
        """Extra scalars for this round's clients."""
        return {}

    def aggregate(self, server_round: int, replies: list[Reply]) -> np.ndarray:
        """New global model from the validated replies (updates server state as a side effect)."""
        raise NotImplementedError

    def expected_uplink(self, partition_id: int) -> tuple[str, ...]:
        """The array names this client must send back this round (FAdamET/GT: + delta_y for clients in Y^t)."""
        return self.uplink_names

    # ---- shared helpers for algorithms -----------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return self.plan.sampler.num_clients

    def local_lr(self, server_round: int) -> float:
        return self.plan.lr * self.plan.lr_decay ** (server_round - 1)

    def cohort_mean(self, replies: Sequence[Reply], value: str | Callable[[Reply], np.ndarray]) -> np.ndarray:
        """mean_S of a named uplink array (or of value(reply)): uniform, the seeds' rule, or weighted by n_i
        (§0.3.3)."""
        get = (lambda r: r.arrays[value]) if isinstance(value, str) else value
        w = np.array([r.num_examples if self.plan.weighting == "samples" else 1.0 for r in replies], np.float64)
        w /= w.sum()
        out = np.zeros(self.dim, np.float64)
        for weight, r in zip(w, replies, strict=True):
            out += weight * get(r)
        return out

    # ---- Flower Strategy API ---------------------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return ndarrays_to_parameters([self.x])

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        self._round_started[server_round] = time.perf_counter()
        nodes = self._discover_nodes(client_manager)
        cohort = self.plan.sampler.cohort(server_round)
        shared = {"model": self.x, **self.downlink(server_round)}
        config: dict[str, Scalar] = {
            "round": server_round,
            "lr": self.local_lr(server_round),
            **self.fit_config(server_round),
        }
        missing = [pid for pid in cohort if pid not in nodes]
        if missing:
            log.warning("round %d: partitions %s have no connected node; counted as failures", server_round, missing)
        self._expected = {pid for pid in cohort if pid in nodes}
        shared_arrays, shared_names = pack(shared)
        shared_params = ndarrays_to_parameters(shared_arrays)
        instructions, sizes = [], []
        for pid in sorted(self._expected):
            params, names, arrays = shared_params, shared_names, shared_arrays
            own = self.client_downlink(server_round, pid)
            if own:
                own_arrays, own_names = pack(own)
                arrays, names = shared_arrays + own_arrays, f"{shared_names},{own_names}"
                params = ndarrays_to_parameters(arrays)
            instructions.append((nodes[pid], FitIns(params, {**config, ARRAYS_KEY: names})))
            sizes.append((nbytes(arrays), len(arrays)))
        self._round_stats[server_round] = {
            "cohort": len(cohort),
            "missing": len(missing),
            "bytes_down_per_client": float(np.mean([b for b, _ in sizes])) if sizes else 0.0,
            "vectors_down_per_client": float(np.mean([v for _, v in sizes])) if sizes else 0.0,
            "lr": config["lr"],
        }
        return instructions

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list):
        replies, rejected = [], 0
        for proxy, res in results:
            try:
                replies.append(self._validate(res))
            except ValueError as err:
                rejected += 1
                log.warning("round %d: rejected reply from node %s: %s", server_round, proxy.cid, err)
        for failure in failures:
            log.warning("round %d: client failure: %s", server_round, _describe_failure(failure))
        stats = self._round_stats.setdefault(server_round, {})
        stats.update(
            replies=len(replies),
            rejected=rejected,
            failures=len(failures) + stats.get("missing", 0),
            client_compute_seconds=sum(float(r.metrics.get("compute-seconds", 0.0)) for r in replies),
            client_compute_max_seconds=max(
                (float(r.metrics.get("compute-seconds", 0.0)) for r in replies), default=0.0
            ),
            train_loss=_weighted_loss(replies),
            bytes_up_per_client=float(np.mean([r.uplink_bytes for r in replies])) if replies else 0.0,
            vectors_up_per_client=float(np.mean([len(r.arrays) for r in replies])) if replies else 0.0,
            local_consistency=_local_consistency(replies),
        )
        if not replies:
            log.warning("round %d: no valid reply; the global model is unchanged", server_round)
            return None, {}
        replies.sort(key=lambda r: r.partition_id)  # arrival order varies; the float sums must not

        self.x = np.asarray(self.aggregate(server_round, replies), dtype=np.float32)
        return ndarrays_to_parameters([self.x]), {}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        return []  # evaluation is centralised (§2.7)

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]], failures: list):
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters):
        due = server_round == 0 or server_round % self.plan.eval_every == 0 or server_round == self.plan.num_rounds
        metrics = self.plan.evaluate(self.x) if (due and self.plan.evaluate) else {}
        row: dict[str, Any] = {"round": server_round, **metrics, **self._round_stats.pop(server_round, {})}
        row.pop("missing", None)
        if server_round in self._round_started:
            row["round_seconds"] = round(time.perf_counter() - self._round_started.pop(server_round), 4)
        if self.plan.recorder is not None:
            self.plan.recorder.record(row)
        if not metrics:
            return None
        loss = metrics.get("loss")
        return float(loss if loss is not None else float("nan")), {
            k: v for k, v in metrics.items() if isinstance(v, (int, float))
        }

    # ---- internals -------------------------------------------------------------------------------
    def _validate(self, res: FitRes) -> Reply:
        metrics = dict(res.metrics or {})
        try:
            arrays = unpack(parameters_to_ndarrays(res.parameters), str(metrics.get(ARRAYS_KEY, "")))
        except PayloadError as err:
            raise ValueError(str(err)) from err
        expected = self.expected_uplink(int(metrics.get("partition-id", -1)))
        if set(arrays) != set(expected):
            raise ValueError(f"arrays {sorted(arrays)} but this algorithm expects {sorted(expected)}")
        for name, a in arrays.items():
            if a.shape != (self.dim,):
                raise ValueError(f"array {name!r} has shape {a.shape}, expected ({self.dim},)")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"array {name!r} has non-finite values")
        pid = int(metrics.get("partition-id", -1))
        if pid not in self._expected:
            raise ValueError(f"partition-id {pid} was not sampled this round")
        if res.num_examples <= 0 or int(metrics.get("steps", 0)) <= 0:
            raise ValueError(f"num_examples={res.num_examples}, steps={metrics.get('steps')}: must be positive")
        loss = float(metrics.get("loss", 0.0))
        if not np.isfinite(loss):
            raise ValueError(f"training loss is {loss}")
        return Reply(
            partition_id=pid,
            num_examples=int(res.num_examples),
            steps=int(metrics["steps"]),
            lr=float(metrics.get("lr", 0.0)),
            arrays={k: v.astype(np.float64) for k, v in arrays.items()},
            metrics=metrics,
            uplink_bytes=nbytes(list(arrays.values())),
        )

    def _discover_nodes(self, client_manager: ClientManager) -> dict[int, ClientProxy]:
        """Ask each connected node once for its partition-id (Flower's node ids are not partition ids)."""
        n = self.plan.sampler.num_clients
        if len(self._node_of) >= n:
            return self._node_of
        if not client_manager.wait_for(1, timeout=int(self.plan.node_wait_seconds)):
            raise FederationError("no SuperNode connected")
        deadline = time.monotonic() + self.plan.node_wait_seconds
        while True:
            known = {p.cid for p in self._node_of.values()}
            fresh = [p for p in client_manager.all().values() if p.cid not in known]
            with ThreadPoolExecutor(max_workers=16) as pool:
                answers = list(pool.map(lambda p: p.get_properties(GetPropertiesIns({}), None, 0), fresh))
            for proxy, ans in zip(fresh, answers, strict=True):
                pid, parts = int(ans.properties["partition-id"]), int(ans.properties["num-partitions"])
                if parts != n or not 0 <= pid < n:
                    raise FederationError(
                        f"num-clients={n} but node {proxy.cid} reports partition-id={pid} of num-partitions={parts}; "
                        f'run the simulation with --federation-config "num-supernodes={n}" (or python -m '
                        "simulation.run, which sets it), or give every SuperNode --node-config "
                        f'"partition-id=<0..{n - 1}> num-partitions={n}"'
                    )
                if pid in self._node_of and self._node_of[pid].cid != proxy.cid:
                    log.warning("partition %d: node %s replaces node %s", pid, proxy.cid, self._node_of[pid].cid)
                self._node_of[pid] = proxy
            if len(self._node_of) >= n or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if len(self._node_of) < n:
            log.warning("only %d of %d partitions have a node; the others count as failures", len(self._node_of), n)
        return self._node_of


def _local_consistency(replies: Sequence[Reply]) -> float | None:
    """FedMIM's (1/S) Σ_i ‖x_{i,K} − mean_S x_{j,K}‖² (§2.7), from the displacements when they are sent."""
    if not replies or "delta" not in replies[0].arrays:
        return None
    deltas = np.stack([r.arrays["delta"] for r in replies])
    return float(np.mean(np.sum((deltas - deltas.mean(axis=0)) ** 2, axis=1)))


def _weighted_loss(replies: Sequence[Reply]) -> float | None:
    if not replies:
        return None
    n = sum(r.num_examples for r in replies)
    return float(sum(r.num_examples * float(r.metrics.get("loss", 0.0)) for r in replies) / n)


def _describe_failure(failure) -> str:
    if isinstance(failure, BaseException):
        return f"{type(failure).__name__}: {failure}"
    proxy, res = failure
    return f"node {proxy.cid}: {getattr(res, 'status', res)}"
