"""The Flower `Strategy` made from a server rule: every algorithm is one of these on the server.

One round, as data flows (the Flower calls in order):
- `configure_fit`: the sampler's cohort is routed to SuperNodes; a rule with a `query` asks it first (clients whose
  answer fails are left out); the model, the rule's downlink and its fit config are packed per client.
- `aggregate_fit`: replies are validated (and screened by observers), failures logged; the run guard may stop the
  run; the accepted replies, in partition order, go to the rule's `aggregate`; the new model is checked finite.
- `evaluate`: the central metrics (test set, and validation union when there is one) of the round are kept, of the
  rule's `evaluation_model()` (x itself unless the rule says otherwise), which federated evaluation also sends;
- `configure_evaluate` / `aggregate_evaluate` (evaluation federated/both, due rounds): the evaluating clients
  (fedsuite.server.federated_evaluation) get the model and their partition id; their replies are checked, failures
  logged, and the federated metrics kept;
- `end_round` (called by the loop, fedsuite.server.loop): central and federated metrics and the round's figures
  make one row; the guard checks the validation loss when there is a validation split, else the test loss
  (central when there is one, else federated); a checkpoint is written when due.
The strategy's state for checkpoints is the rule's declared state, the acceptance ledger, the guard's and its stages'.

Every mechanism that cuts across the algorithms is a round stage (fedsuite/stages/server.py), called at fixed points
of each round above and named nowhere here (docs/developer/architecture.md#round-stages): the stages may end the run,
leave clients out, add fit-config entries, arrays beside the model and row figures, take arrays out of a reply before
it is validated, screen and change the valid replies, and follow the applied model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from fedsuite.codec.payload import (
    ALGORITHM_KEY,
    ARRAYS_KEY,
    PARTITION_KEY,
    STATE_ACCEPTED,
    STATE_KEY,
    nbytes,
)
from fedsuite.results.folder import STATUSES
from fedsuite.rules.declared import Counter
from fedsuite.rules.rounds import Reply
from fedsuite.rules.server_rule import ServerRule
from fedsuite.server import checkpointing
from fedsuite.server.accounting import RoundLog, start_loss
from fedsuite.server.evaluation_calls import EvaluationCalls
from fedsuite.server.guard import RunAborted, RunGuard, Verdict
from fedsuite.server.observers import RoundObserver
from fedsuite.server.placement import DevicePlacement, HostPlacement, placeable, too_large
from fedsuite.server.plan import RunPlan
from fedsuite.server.query import ask
from fedsuite.server.replies import (
    LOST_WORKER,
    RejectedReply,
    all_finite,
    describe_failure,
    failure_details,
    validate,
)
from fedsuite.server.routing import Router
from fedsuite.server.rule_result import new_model
from fedsuite.server.stages import StageLookup, addressed, arrays_beside, server_stages, take_arrays
from fedsuite.server.wide_copies import WideCopies
from fedsuite.server.wire import to_parameters
from fedsuite.stages.server import STOPPED, ServerStage

log = logging.getLogger("flwr.fedsuite")
ACCEPTED = Counter("accepted")  # partition → last round its reply was aggregated (fedsuite.state.store)


class RuleStrategy(StageLookup, EvaluationCalls, Strategy):
    def __init__(self, rule: ServerRule, plan: RunPlan, observers: Iterable[RoundObserver] = (),
                 stages: Iterable[ServerStage] | None = None):  # fmt: skip
        """`stages`: the run's round stages (fedsuite/stages/server.py; the composition root builds them with
        fedsuite.server.stages.server_stages), by default those its run config alone switches on."""
        super().__init__()
        self.rule, self.plan = rule, plan
        self.observers = list(observers)
        self.router = Router(plan.sampler.num_clients, plan.client_mapping, plan.node_wait_seconds, plan.query_workers,
                             plan.shares)  # fmt: skip
        self.guard = RunGuard(plan.min_replies, plan.divergence_factor)
        self.rounds = RoundLog()
        self._wide = WideCopies()  # the replies' float64 copies, in arrays reused round after round
        self.stages = list(server_stages(plan.run_config) if stages is None else stages)
        self.accepted: dict[int, int] = ACCEPTED.initial(rule.dim)
        self._sampled: set[int] = set()
        self._asked: set[int] = set()  # partitions asked to evaluate this round
        self._metrics: dict[int, dict[str, Any]] = {}  # round → its central and federated metrics so far
        self.placement = HostPlacement()  # where the rule's vectors and the messages' arrays are (`place`)

    @property
    def x(self) -> np.ndarray:
        """The global model as a host array (wherever the rule keeps it)."""
        return self.placement.host(self.rule.x)

    def place(self, vectors) -> str | None:
        """Keep the rule's vectors, the fit instructions' arrays and the replies' vectors with `vectors` (an OnDevice,
        fedsuite/rules/vectors.py) for the rest of the run (fedsuite/server/placement.py); why not, if it may not."""
        if self.placement.on_device:
            return None
        if (why := placeable(self) or too_large(self.rule, vectors.device)) is not None:
            return why
        self.rule.place(vectors)
        self.placement = DevicePlacement(vectors)
        return None

    @property
    def dim(self) -> int:
        return self.rule.dim

    # ---- declared state (checkpoints) ------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {"rule": self.rule.state_dict(), ACCEPTED.name: self.accepted, "guard": self.guard.state_dict()}
        for stage in self.stages:
            if stage.state_name is not None:
                state[stage.state_name] = stage.state_dict()
        return state

    def load_state_dict(self, values: dict[str, Any]) -> None:
        expected = {"rule", ACCEPTED.name, "guard"}
        expected |= {stage.state_name for stage in self.stages if stage.state_name is not None}
        if set(values) != expected:
            raise ValueError(f"strategy state has {sorted(values)}, expected {', '.join(sorted(expected))}")
        if (problem := ACCEPTED.check(values[ACCEPTED.name], self.dim)) is not None:
            raise ValueError(problem)
        self.rule.load_state_dict(values["rule"])
        self.accepted = values[ACCEPTED.name]
        self.guard.load_state_dict(values["guard"])
        for stage in self.stages:
            if stage.state_name is not None:
                stage.load_state_dict(values[stage.state_name])

    # ---- Flower Strategy API ---------------------------------------------------------------------
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return to_parameters([self.rule.x])

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        cohort = self.plan.sampler.cohort(server_round)
        for stage in self.stages:  # a stage's limit the round would pass: the run ends here
            if (spent := stage.stop_before(server_round, cohort)) is not None:
                self._end_run(STOPPED, spent)
        self.rounds.started(server_round)
        absent = {pid: why for stage in self.stages for pid, why in stage.absent(server_round, cohort).items()}
        for pid, reason in absent.items():
            self._client_problem(server_round, f"client {pid}", f"failed: {reason}")
        nodes = self.router.route([pid for pid in cohort if pid not in absent], client_manager)
        missing = [pid for pid in cohort if pid not in nodes and pid not in absent]
        if missing:
            log.warning("round %d: partitions %s have no connected node; counted as failures", server_round, missing)
        nodes, query = self._query(server_round, nodes)
        lr = self.rule.local_lr(server_round)
        config: dict[str, Scalar] = {"round": server_round, "lr": lr, ALGORITHM_KEY: self.plan.algorithm,
                                     **self.rule.fit_config(server_round)}  # fmt: skip
        for stage in self.stages:
            config.update(stage.round_config(server_round, cohort))
        self._sampled = set(nodes)
        instructions, sizes = self._instructions(server_round, config, nodes)
        self.rounds.sent(server_round, len(cohort), len(cohort) - len(nodes), sizes, lr)  # absent ones: failures
        for stage in self.stages:
            self.rounds.note(server_round, stage.sent(server_round, absent))
        if query is not None:
            self.rounds.queried(server_round, query[0], query[1], query[2])
        if not cohort or (absent and not instructions):  # nobody drawn (a stage's own sampling), or every client
            # left out: Flower will not call aggregate_fit, but a stage may still release a round without replies,
            # and the run guard judges a round that lost its whole cohort
            self.aggregate_fit(server_round, [], [])
        return instructions

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list):
        for observer in self.observers:
            observer.failed(server_round, failures)
        for stage in self.stages:  # a client a stage's limit stopped: the round is not applied
            if (spent := stage.refused(server_round, results, failures)) is not None:
                self._end_run(STOPPED, spent)
        replies, rejected, diverged = self._valid_replies(server_round, results)
        answered = {_partition_of(res) for _, res in results}
        silent = sorted(self._sampled - answered)  # who the failures without a sender can be
        for failure in failures:
            proxy = failure[0] if isinstance(failure, tuple) else None
            who = self.router.who(proxy) if proxy is not None else self.router.unanswered(silent)
            self._client_problem(server_round, who, f"failed: {describe_failure(failure)}", failure_details(failure))
        self._judge(server_round, replies, rejected, diverged, len(results), failures)
        if not replies:  # a round that releases something all the same (a stage's replies of its own)
            lr = self.rule.local_lr(server_round)
            replies = [reply for stage in self.stages for reply in stage.empty_round(server_round, self.rule, lr)]
        if not replies:
            log.warning("round %d: no valid reply; the global model is unchanged", server_round)
            self.rule.empty_round(server_round)
            return None, {}
        self._apply(server_round, replies)
        return self.placement.parameters([self.rule.x]), {}

    def end_round(self, server_round: int) -> None:
        """The round's one row (central and federated metrics, the round's figures); the guard checks the test loss,
        central when there is one, else federated; a checkpoint when due."""
        plan = self.plan
        metrics = self._metrics.pop(server_round, {})
        row = self.rounds.row(server_round, metrics)
        # with a validation split the guard reads it, so the test set decides nothing (not even which tuning trial
        # counts as diverged); else the central test loss, else the federated one
        loss = next((metrics[k] for k in ("val_loss", "loss", "fed_val_loss", "fed_loss") if k in metrics), None)
        verdict = self.guard.test_loss(server_round, loss) or self._row_verdict(server_round, metrics)
        if verdict is not None:  # diverged, or a stage's verdict (ServerStage.check_row)
            self._record(row, *verdict)
            raise RunAborted(*verdict)
        due = checkpointing.due(plan, server_round)
        last = server_round >= plan.num_rounds
        # the last round's checkpoint is written before the run is called completed: a checkpoint that cannot be
        # written fails the run (its reason in summary.json) instead of leaving `completed` behind an error
        self._record(row, "running" if due and last else None)
        if due:
            checkpointing.write(plan, server_round, self.state_dict())
            if last:
                plan.recorder.finish("completed")

    # ---- internals -------------------------------------------------------------------------------
    def _query(self, server_round: int, nodes: dict) -> tuple[dict, tuple | None]:
        """The routed clients that answered the rule's query (all of them when it asks none), and the query's
        figures (bytes down, mean bytes up, seconds), or None."""
        rule = self.rule
        if rule.query is None:
            return nodes, None
        answers = ask(rule.query, server_round, rule.x, nodes, self.plan.query_workers, self.plan.state_key)
        for observer in self.observers:
            observer.queried(server_round, rule.x.copy(), answers)
        rule.answered(server_round, answers)
        nodes = {pid: node for pid, node in nodes.items() if pid in answers}
        return nodes, (nbytes([rule.x]), float(np.mean([a.nbytes for a in answers.values()])) if answers else 0.0,
                       sum(a.seconds for a in answers.values()))  # fmt: skip

    def _instructions(self, server_round: int, config: dict[str, Scalar], nodes: dict) -> tuple[list, list]:
        """Each routed client's FitIns (the model, the rule's shared and own downlink, the stages' arrays beside
        them; the fit config with the client's own entries) and its (bytes, vectors), the stages' arrays left out."""
        rule = self.rule
        downlink = rule.downlink(server_round)
        for observer in self.observers:
            observer.sent(server_round, rule.x, downlink)
        beside = arrays_beside(self.stages, server_round)
        shared = {"model": rule.x, **downlink}
        shared_arrays, shared_names = self.placement.pack({**shared, **beside})
        shared_params = self.placement.parameters(shared_arrays)
        beside_bytes = nbytes(list(beside.values()))  # communication figures count the federated vectors only
        instructions, sizes = [], []
        for pid in sorted(self._sampled):
            accepted = self.accepted.get(pid, 0)
            mine, entries = addressed(self.stages, server_round, pid, accepted, shared)
            params, names, arrays = shared_params, shared_names, shared_arrays
            if mine is not shared:  # a stage gave this client its own form of the shared vectors
                arrays, names = self.placement.pack({**mine, **beside})
                params = self.placement.parameters(arrays)
            own = rule.client_downlink(server_round, pid)
            if own:
                own_arrays, own_names = self.placement.pack(own)
                arrays, names = arrays + own_arrays, f"{names},{own_names}"
                params = self.placement.parameters(arrays)
            fit_config = {**config, ARRAYS_KEY: names, STATE_ACCEPTED: accepted, PARTITION_KEY: pid,
                          STATE_KEY: str(self.plan.state_key), **self._client_config(server_round, pid),
                          **entries}  # fmt: skip
            instructions.append((nodes[pid], FitIns(params, fit_config)))
            sizes.append((nbytes(arrays) - beside_bytes, len(shared) + len(own)))
        return instructions, sizes

    def _valid_replies(self, server_round: int, results: list[tuple[ClientProxy, FitRes]]) -> tuple[list, int, int]:
        """The round's accepted replies as the stages let them stand, the rejected count and how many of those
        diverged; each rejection logged."""
        replies, rejected, diverged = [], 0, 0
        for proxy, res in results:
            try:
                replies.append(self._accept(server_round, res))
            except RejectedReply as err:
                rejected += 1
                diverged += err.diverged
                self._client_problem(server_round, self.router.who(proxy, res), f"rejected: {err}", err.details)
        for stage in self.stages:  # e.g. a rejected reply inside a sum of replies rejects the whole round
            replies, rejected = stage.screen(server_round, replies, rejected)
        return replies, rejected, diverged

    def _accept(self, server_round: int, res: FitRes) -> Reply:
        res, taken = take_arrays(self.stages, server_round, res)
        reply = validate(res, lambda pid: self.rule.expected_uplink(server_round, pid), self._sampled, self.dim,
                         lambda a: self._wide.copy(a, server_round))  # fmt: skip
        reply = self.placement.reply(reply)
        for stage, arrays in taken:
            stage.keep(server_round, reply.partition_id, arrays)
        for observer in self.observers:
            if (reason := observer.screen(server_round, reply)) is not None:
                raise RejectedReply(reason)
        return reply

    def _judge(self, server_round: int, replies: list[Reply], rejected: int, diverged: int, answered: int,
               failures: list) -> None:  # fmt: skip
        """The round's figures from its valid replies, and the run guard's verdicts on them (RunAborted)."""
        private = any(stage.hides_replies for stage in self.stages)
        stats = self.rounds.received(server_round, replies, rejected, len(failures), private=private)
        for stage in self.stages:
            self.rounds.note(server_round, stage.received(server_round, replies))
        self.rounds.settle_query(server_round)
        dead = sum(LOST_WORKER in describe_failure(f) for f in failures)
        self._stop_if(server_round, self.guard.lost_workers(server_round, dead))
        cohort = self.rounds.cohort(server_round, answered + len(failures))
        verdict = self.guard.replies(server_round, len(replies), cohort, rejected, diverged, stats["failures"])
        self._stop_if(server_round, verdict)
        self._stop_if(server_round, self.guard.train_loss(server_round, stats["train_loss"], start_loss(replies)))

    def _apply(self, server_round: int, replies: list[Reply]) -> None:
        """The stages' release, then the rule's aggregate of the replies in partition order, checked finite; the
        stages and observers follow the new model, and the acceptance ledger records the replies."""
        replies.sort(key=lambda r: r.partition_id)  # arrival order varies; the float sums must not
        for stage in self.stages:  # before anyone reads the replies
            self.rounds.note(server_round, stage.release(server_round, replies))
        for observer in self.observers:
            observer.replied(server_round, replies)
        x_before = self.rule.x
        returned = self.rule.aggregate(server_round, replies)
        new_x = new_model(self.plan.algorithm, self.rule, server_round, returned)  # float32, shapes checked
        self._stop_if(server_round, self.guard.model(server_round, all_finite(new_x)))
        self.rule.x = new_x
        if figures := self.rule.round_figures(server_round):
            self.rounds.note(server_round, figures)
        for stage in self.stages:
            stage.applied(server_round, replies)
        for reply in replies:
            if reply.partition_id >= 0:  # not a stage's own reply of a round without any (ServerStage.empty_round)
                self.accepted[reply.partition_id] = server_round
        for observer in self.observers:
            observer.aggregated(server_round, self, x_before, replies)

    def _client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        """The stages' entries of one client's fit config."""
        return {k: v for stage in self.stages for k, v in stage.client_config(server_round, partition_id).items()}

    def _row_verdict(self, server_round: int, metrics: dict[str, Any]) -> Verdict:
        """The first stage's verdict on the round's metrics, or None."""
        return next((v for stage in self.stages if (v := stage.check_row(server_round, metrics)) is not None), None)

    def _stop_if(self, server_round: int, verdict: Verdict) -> None:
        """Record the round with the verdict's status and stop the run (RunAborted), if there is a verdict."""
        if verdict is not None:
            self._record(self.rounds.row(server_round), *verdict)
            raise RunAborted(*verdict)

    def _end_run(self, status: str, reason: str) -> None:
        """End the run before a round starts (no row for it): the summary says why, and RunAborted stops the loop."""
        log.info("fedsuite │ %s: %s", status, reason)
        if self.plan.recorder is not None:
            self.plan.recorder.finish(status, reason)
        raise RunAborted(status, reason)

    def _record(self, row: dict[str, Any], status: str | None = None, reason: str | None = None) -> None:
        for stage in self.stages:  # columns of every row
            row.update(stage.row_labels())
        if STATUSES.get(status) == 0:  # stopped as the run config asked
            log.info("fedsuite │ %s: %s", status, reason)
        elif status not in (None, "running"):
            log.error("fedsuite │ %s: %s", status, reason)
        for observer in self.observers:
            observer.recorded(row)
        recorder = self.plan.recorder
        if recorder is None:
            return
        if status is None:
            recorder.record(row)
        else:
            recorder.record(row, status, reason)

    def _client_problem(self, server_round: int, who: str, reason: str, details: str = "") -> None:
        """One console line per failed client per round; the full story goes to clients.log."""
        log.warning("round %d: %s %s", server_round, who, reason)
        if self.plan.recorder is not None:
            self.plan.recorder.client_problem(server_round, who, reason, details)


def _partition_of(res) -> int:
    """The partition a reply says it is from (-1 when it names none, or nothing that is a number)."""
    try:
        return int((res.metrics or {}).get("partition-id", -1))
    except (TypeError, ValueError, OverflowError):
        return -1
