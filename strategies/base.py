"""The server half every algorithm shares, on Flower's legacy `Strategy` API.

Plumbing lives here: seeded cohorts routed to SuperNodes (logical clients spread over whatever nodes are
connected, or, with client-mapping='fixed', each partition to the node that reports it: issue 9), payload
encode/decode, validation of client replies (rejected and logged, never averaged in), communication accounting,
centralised evaluation and the results rows, and the run's honesty checks: a round with fewer valid replies than
`min_replies` of its cohort stops the run as `failed` (or `diverged` when the clients lost were lost to non-finite
training), and a non-finite global model or an exploding test loss stops it as `diverged` (RunAborted, after
summary.json says why). An algorithm subclass only says what it keeps (`__init__`), what it sends (`downlink`,
`fit_config`), what it expects back (`uplink_names`) and how replies become the new model (`aggregate`).
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
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

from fedsuite import checkpoint
from fedsuite.payload import (
    ALGORITHM_KEY,
    ARRAYS_KEY,
    PARTITION_KEY,
    STATE_ACCEPTED,
    PayloadError,
    nbytes,
    pack,
    unpack,
)
from fedsuite.results import RunRecorder
from fedsuite.sampling import Sampler

log = logging.getLogger("flwr.fedsuite")

# Client errors (clients/base.py sends "<ExceptionName>: message") that mean local training diverged.
DIVERGENCE_ERRORS = ("FloatingPointError",)
LOST_WORKER = "ActorDiedError"  # Flower's simulation reports a dead Ray worker this way; it is never replaced


class FederationError(RuntimeError):
    """The connected SuperNodes do not form the federation the run config describes."""


class RunAborted(RuntimeError):
    """The run cannot go on truthfully; summary.json already holds `status` and the reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status


class RejectedReply(ValueError):
    """A client reply that is not averaged in; `diverged` marks non-finite training as the cause."""

    def __init__(self, reason: str, diverged: bool = False, details: str = ""):
        super().__init__(reason)
        self.diverged, self.details = diverged, details


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
    min_replies: float = 0.5  # share of the cohort that must reply validly each round (0: any number, even none)
    divergence_factor: float = 100.0  # test loss above this × the initial loss = diverged (0: non-finite only)
    algorithm: str = ""  # sent to clients, which refuse to train for another algorithm
    agg_scale: str = "mean"  # or "1/N": Σ_S Δ_i / N, the LoSAC paper's eq. (13) (§3.7)
    # messages the strategy sends at once outside Flower's fit exchange (node discovery, MimeSVRG's gradient query);
    # the in-process runner sets 1: Flower's payload decoding is not thread-safe there (issue 11)
    query_workers: int = 16
    client_mapping: str = "logical"  # or "fixed": one SuperNode per partition, found by asking each (issue 9)
    client_state_root: Path | None = None  # the run's client-state files (fedsuite.state.state_root), if any
    run_id: int = 0
    checkpoint_every: int = 0  # rounds between checkpoints (fedsuite.checkpoint); 0 = none
    run_config: dict[str, Any] = field(default_factory=dict)  # the resolved run config, stored in checkpoints
    start_round: int = 0  # the checkpoint's round when resuming: rounds start after it
    resume: Any = None  # the fedsuite.checkpoint.Checkpoint to resume from


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
        self._node_of: dict[int, ClientProxy] = {}  # client-mapping='fixed': partition → its own SuperNode
        self._routed: dict[int, ClientProxy] = {}  # this round: partition → the node that carries its message
        self._round_started: dict[int, float] = {}
        self._round_stats: dict[int, dict[str, Any]] = {}
        self._initial_loss: float | None = None
        self._accepted: dict[int, int] = {}  # partition → last round its reply was aggregated (fedsuite.state)

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

    def empty_round(self, server_round: int) -> None:
        """A round without a valid reply (allowed with min-replies=0) keeps x: record it as a zero move in any
        history the algorithm extrapolates from (FedMIM's δ's, FedSpeed-Ing's x^{t−1})."""

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

    def displacement(self, replies: Sequence[Reply], name: str = "delta") -> np.ndarray:
        """The aggregate model move before η_g: mean_S(Δ_i), or Σ_S Δ_i / N with agg-scale='1/N' (§3.7)."""
        if self.plan.agg_scale == "1/N":
            return sum(r.arrays[name] for r in replies) / self.num_clients
        return self.cohort_mean(replies, name)

    # ---- Flower Strategy API ---------------------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return ndarrays_to_parameters([self.x])

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        self._round_started[server_round] = time.perf_counter()
        cohort = self.plan.sampler.cohort(server_round)
        nodes = self._route(cohort, client_manager)
        shared = {"model": self.x, **self.downlink(server_round)}
        config: dict[str, Scalar] = {
            "round": server_round,
            "lr": self.local_lr(server_round),
            ALGORITHM_KEY: self.plan.algorithm,
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
            fit_config = {**config, ARRAYS_KEY: names, STATE_ACCEPTED: self._accepted.get(pid, 0), PARTITION_KEY: pid}
            instructions.append((nodes[pid], FitIns(params, fit_config)))
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
        replies, rejected, diverged = [], 0, 0
        for proxy, res in results:
            try:
                replies.append(self._validate(res))
            except RejectedReply as err:
                rejected += 1
                diverged += err.diverged
                self._client_problem(server_round, self._who(proxy, res), f"rejected: {err}", err.details)
        for failure in failures:
            proxy = failure[0] if isinstance(failure, tuple) else None
            self._client_problem(server_round, self._who(proxy), f"failed: {_describe_failure(failure)}",
                                 _failure_details(failure))  # fmt: skip
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
        dead = [f for f in failures if LOST_WORKER in _describe_failure(f)]
        if dead:
            self._abort(
                server_round,
                "failed",
                f"round {server_round}: a simulation worker (Ray actor) died ({len(dead)} client(s) lost; killed, "
                "or out of memory?). Flower does not replace it, so every later round would lose the clients "
                "scheduled on it: the run stops here. Start it again: the same seed gives the same cohorts and "
                "numbers (lower the memory per client, or fewer parallel clients, if memory was the cause)",
            )
        cohort = int(stats.get("cohort", len(results) + len(failures)))
        needed = max(1, math.ceil(self.plan.min_replies * cohort)) if self.plan.min_replies > 0 else 0
        if len(replies) < needed:
            lost = cohort - len(replies)
            status = "diverged" if diverged * 2 > lost else "failed"
            cause = (
                "training diverged (non-finite values)" if status == "diverged" else "clients failed or were rejected"
            )
            self._abort(
                server_round,
                status,
                f"round {server_round}: {len(replies)} valid replies from a cohort of {cohort}, min-replies="
                f"{self.plan.min_replies:g} needs {needed}; {cause} ({rejected} rejected, {stats['failures']} failed; "
                "reasons above and in clients.log)",
            )
        if not replies:
            log.warning("round %d: no valid reply; the global model is unchanged", server_round)
            self.empty_round(server_round)
            return None, {}
        replies.sort(key=lambda r: r.partition_id)  # arrival order varies; the float sums must not

        new_x = np.asarray(self.aggregate(server_round, replies), dtype=np.float32)
        if not np.all(np.isfinite(new_x)):
            self._abort(server_round, "diverged", f"round {server_round}: the aggregated global model is not finite")
        self.x = new_x
        for reply in replies:
            self._accepted[reply.partition_id] = server_round
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
        problem = self._divergence(server_round, metrics.get("loss"))
        if problem:
            self._record(row, "diverged", problem)
            raise RunAborted("diverged", problem)
        self._record(row)
        self._checkpoint(server_round)
        if not metrics:
            return None
        loss = metrics.get("loss")
        return float(loss if loss is not None else float("nan")), {
            k: v for k, v in metrics.items() if isinstance(v, (int, float))
        }

    def _checkpoint(self, server_round: int) -> None:
        """Every checkpoint-every rounds and after the last, between rounds (fedsuite.checkpoint)."""
        every, recorder = self.plan.checkpoint_every, self.plan.recorder
        if every <= 0 or recorder is None or server_round == 0:
            return
        if server_round % every and server_round != self.plan.num_rounds:
            return
        checkpoint.write(recorder.folder, server_round, self, recorder.rows, self.plan.run_config,
                         self.plan.client_state_root)  # fmt: skip
        recorder.resume_command = checkpoint.resume_command(recorder.folder)
        recorder.write_summary(recorder.status)

    # ---- honesty checks --------------------------------------------------------------------------
    def _divergence(self, server_round: int, loss: float | None) -> str | None:
        """Why the evaluated model counts as diverged, or None (non-finite loss, or above factor × initial)."""
        if loss is None:
            return None
        if not math.isfinite(loss):
            return f"round {server_round}: the test loss is {loss}"
        if self._initial_loss is None:
            self._initial_loss = abs(float(loss))
            return None
        limit = self.plan.divergence_factor * max(self._initial_loss, 1e-12)
        if self.plan.divergence_factor > 0 and loss > limit:
            return (
                f"round {server_round}: the test loss {loss:.4g} exceeds divergence-factor="
                f"{self.plan.divergence_factor:g} × the initial loss {self._initial_loss:.4g}; lower lr"
            )
        return None

    def _abort(self, server_round: int, status: str, reason: str) -> None:
        row = {"round": server_round, **self._round_stats.pop(server_round, {})}
        row.pop("missing", None)
        if server_round in self._round_started:
            row["round_seconds"] = round(time.perf_counter() - self._round_started.pop(server_round), 4)
        self._record(row, status, reason)
        raise RunAborted(status, reason)

    def _record(self, row: dict[str, Any], status: str | None = None, reason: str | None = None) -> None:
        if status is not None:
            log.error("fedsuite │ %s: %s", status, reason)
        if self.plan.recorder is None:
            return
        if status is None:
            self.plan.recorder.record(row)
        else:
            self.plan.recorder.record(row, status, reason)

    def _client_problem(self, server_round: int, who: str, reason: str, details: str = "") -> None:
        """One console line per failed client per round; the full story goes to clients.log."""
        log.warning("round %d: %s %s", server_round, who, reason)
        if self.plan.recorder is not None:
            self.plan.recorder.client_problem(server_round, who, reason, details)

    def _who(self, proxy: ClientProxy | None, res: FitRes | None = None) -> str:
        pid = (res.metrics or {}).get("partition-id") if res is not None else None
        if pid is not None:
            return f"client {pid}"
        if proxy is None:
            return "a client"
        carried = sorted(p for p, node in self._routed.items() if node.cid == proxy.cid)
        if len(carried) == 1:
            return f"client {carried[0]}"
        return f"node {proxy.cid}" + (f" (carrying clients {carried})" if carried else "")

    # ---- internals -------------------------------------------------------------------------------
    def _validate(self, res: FitRes) -> Reply:
        metrics = dict(res.metrics or {})
        if "error" in metrics:
            error = str(metrics["error"])
            raise RejectedReply(error, error.startswith(DIVERGENCE_ERRORS), str(metrics.get("traceback", "")))
        try:
            arrays = unpack(parameters_to_ndarrays(res.parameters), str(metrics.get(ARRAYS_KEY, "")))
        except PayloadError as err:
            raise RejectedReply(str(err)) from err
        expected = self.expected_uplink(int(metrics.get("partition-id", -1)))
        if set(arrays) != set(expected):
            raise RejectedReply(f"arrays {sorted(arrays)} but this algorithm expects {sorted(expected)}")
        for name, a in arrays.items():
            if a.shape != (self.dim,):
                raise RejectedReply(f"array {name!r} has shape {a.shape}, expected ({self.dim},)")
            if not np.all(np.isfinite(a)):
                raise RejectedReply(f"array {name!r} has non-finite values", diverged=True)
        pid = int(metrics.get("partition-id", -1))
        if pid not in self._expected:
            raise RejectedReply(f"partition-id {pid} was not sampled this round")
        if res.num_examples <= 0 or int(metrics.get("steps", 0)) <= 0:
            raise RejectedReply(f"num_examples={res.num_examples}, steps={metrics.get('steps')}: must be positive")
        loss = float(metrics.get("loss", 0.0))
        if not np.isfinite(loss):
            raise RejectedReply(f"training loss is {loss}", diverged=True)
        return Reply(
            partition_id=pid,
            num_examples=int(res.num_examples),
            steps=int(metrics["steps"]),
            lr=float(metrics.get("lr", 0.0)),
            arrays={k: v.astype(np.float64) for k, v in arrays.items()},
            metrics=metrics,
            uplink_bytes=nbytes(list(arrays.values())),
        )

    def _route(self, cohort: Sequence[int], client_manager: ClientManager) -> dict[int, ClientProxy]:
        """partition → the node that carries its message this round. Logical mapping: round-robin over the
        connected nodes in node-id order, no discovery (a node trains whichever partition a message names; state
        lives in per-partition files, never in a node's Context, so two partitions on one node cannot race).
        Fixed mapping: the node that reported the partition (missing ones count as failures)."""
        if self.plan.client_mapping == "fixed":
            nodes = self._discover_nodes(client_manager)
            self._routed = {pid: nodes[pid] for pid in cohort if pid in nodes}
            return self._routed
        if not client_manager.wait_for(1, timeout=int(self.plan.node_wait_seconds)):
            raise FederationError("no SuperNode connected")
        workers = sorted(client_manager.all().values(), key=lambda p: _node_order(p.cid))
        self._routed = {pid: workers[i % len(workers)] for i, pid in enumerate(cohort)}
        return self._routed

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
            with ThreadPoolExecutor(max_workers=self.plan.query_workers) as pool:
                answers = list(pool.map(lambda p: p.get_properties(GetPropertiesIns({}), None, 0), fresh))
            for proxy, ans in zip(fresh, answers, strict=True):
                pid, parts = int(ans.properties["partition-id"]), int(ans.properties["num-partitions"])
                if parts != n or not 0 <= pid < n:
                    raise FederationError(
                        f"client-mapping='fixed' and num-clients={n} but node {proxy.cid} reports partition-id={pid} "
                        f"of num-partitions={parts}; give every SuperNode --node-config "
                        f"\"partition-id=<0..{n - 1}> num-partitions={n}\", or use client-mapping='logical' "
                        "(any number of SuperNodes, each trains whichever partition a message names)"
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


def _node_order(cid: str) -> tuple:
    """Flower's node ids are integers in strings; numeric order where they are numbers."""
    return (0, int(cid), "") if cid.isdigit() else (1, 0, cid)


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
    """One line: the exception (or the reply's status) without its traceback."""
    error = failure if isinstance(failure, BaseException) else failure[1]
    if isinstance(error, BaseException):
        first = str(error).strip().splitlines()
        text = f"{type(error).__name__}: {first[0] if first else ''}"
    else:
        status = getattr(error, "status", error)
        text = f"{getattr(getattr(status, 'code', None), 'name', 'error')}: {getattr(status, 'message', status)}"
    return text if len(text) <= 300 else text[:297] + "..."


def _failure_details(failure) -> str:
    error = failure if isinstance(failure, BaseException) else failure[1]
    if isinstance(error, BaseException):
        return "".join(traceback.format_exception(error))
    return str(getattr(error, "status", error))
