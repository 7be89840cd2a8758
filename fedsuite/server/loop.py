"""fedsuite's one round loop over a RuleStrategy, and the truth about how it ended.

Whatever ends the run early is written to summary.json before it propagates (a strategy's RunAborted has written its
own status; any other exception is `failed`, an interruption `interrupted`), so a results folder never says
`running` about a run that has stopped. A resumed run starts after the checkpoint's round.

How a round's clients are trained is the loop's fit round (FitRound, below: Flower's own), which the composition root
(fedsuite/run/compose.py) picks for the run: SecAgg+'s workflow (fedsuite/server/secure.py), the batched engine's
dispatcher or share messages (fedsuite/batched/server.py), the in-process secure sum
(fedsuite/run/secagg_arithmetic.py).

Stops from outside the ServerApp (docs/reliability.md#how-a-stop-is-recorded): Flower ends its simulation process
from the main thread (`flwr stop <run-id>` makes it send itself SIGINT), while the ServerApp runs in another thread
that is cut off a few seconds later without any exception reaching it; watch_flower_exit records the stop from
Flower's exit handlers. A launch of simulation.run leaves a stop note first (fedsuite.run.stop_note), which
StopAwareRecorder reads before it records a failure that the stop itself caused.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from logging import INFO

from flwr.common.logger import log as flwr_log
from flwr.server import History, Server
from flwr.server.client_manager import SimpleClientManager
from flwr.server.server import fit_clients

from fedsuite.results.folder import RunRecorder
from fedsuite.run.stop_note import stop_note
from fedsuite.server.guard import RunAborted
from fedsuite.server.privacy import BUDGET_SPENT
from fedsuite.server.pruning import PRUNED
from fedsuite.state import run_state
from fedsuite.state.folders import is_run_scoped

log = logging.getLogger("flwr.fedsuite")


class FitRound:
    """Flower's own fit round (flwr.server.Server.fit_round): the strategy's fit instructions, each sent as its own
    message on Flower's thread pool, the replies to `aggregate_fit`. An engine that reaches its clients another way
    replaces `exchange`, or the whole round (`run`)."""

    def run(self, loop: RoundLoop, server_round: int, timeout: float | None):
        """One fit round of `loop`: (parameters, metrics, (results, failures)), or None when no client was sampled."""
        manager = loop.client_manager()
        instructions = loop.strategy.configure_fit(server_round=server_round, parameters=loop.parameters,
                                                   client_manager=manager)  # fmt: skip
        if not instructions:
            flwr_log(INFO, "configure_fit: no clients selected, cancel")
            return None
        flwr_log(INFO, "configure_fit: strategy sampled %s clients (out of %s)", len(instructions),
                 manager.num_available())  # fmt: skip
        results, failures = self.exchange(loop, instructions, server_round, timeout)
        flwr_log(INFO, "aggregate_fit: received %s results and %s failures", len(results), len(failures))
        parameters, metrics = loop.strategy.aggregate_fit(server_round, results, failures)
        return parameters, metrics, (results, failures)

    def exchange(self, loop: RoundLoop, instructions: list, server_round: int, timeout: float | None):
        """(results, failures) of the round's instructions: one message per client, as Flower sends them."""
        return fit_clients(client_instructions=instructions, max_workers=loop.max_workers, timeout=timeout,
                           group_id=server_round)  # fmt: skip


class RoundLoop(Server):
    """The round loop of every surface: rounds from the checkpoint's on, central and federated evaluation, the
    round's row; and whatever ends the run early written to summary.json before it propagates (module docstring).

    A subclass of Flower's Server because Flower's API forces one: a legacy ServerApp replaces Flower's loop only
    through ServerAppComponents(server=...), which takes a Server and calls its `fit`. Everything that differs by
    engine is the `fit_round` policy it delegates each round's training to (FitRound), not another subclass."""

    def __init__(self, strategy, recorder, fit_round: FitRound | None = None, remove_client_state: bool = True):
        super().__init__(client_manager=SimpleClientManager(), strategy=strategy)
        self.recorder = recorder
        self.round_policy = fit_round or FitRound()
        self.remove_client_state = remove_client_state

    def fit_round(self, server_round: int, timeout: float | None):
        return self.round_policy.run(self, server_round, timeout)

    def fit(self, num_rounds: int, timeout: float | None):
        try:
            result = self._rounds(num_rounds, timeout)
        except RunAborted as err:
            self._ended(err.status, str(err))
            if err.status in (BUDGET_SPENT, PRUNED):  # stopped as the run config asked (dp-target-epsilon, prune-at)
                return History(), 0.0
            raise
        except (KeyboardInterrupt, SystemExit) as err:
            said = str(err) if isinstance(err, KeyboardInterrupt) and str(err) else type(err).__name__
            self._finish("interrupted", f"the ServerApp was stopped ({said})")  # e.g. (stopped by SIGTERM)
            raise
        except BaseException as err:
            self._finish("failed", f"{type(err).__name__}: {err}")
            raise
        else:
            self._ended("completed")
            return result
        finally:
            self._remove_run_state()

    def _ended(self, status: str, reason: str | None = None) -> None:
        """Tell the strategy's observers (trackers) how the run ended; one that fails to close is only logged."""
        for observer in getattr(self.strategy, "observers", ()):
            try:
                observer.ended(status, reason)
            except Exception as err:  # a tracker's close must not change the run's outcome
                log.warning("fedsuite │ observer %s failed at the end of the run: %s", type(observer).__name__, err)

    def _remove_run_state(self) -> None:
        """A run's own client state (a per-run folder, in RAM for client-state memory, or the memory tier's shelf)
        goes with the run; checkpoints hold their own copies. A configured client-state-dir is the user's and stays."""
        plan = self.strategy.plan
        root = plan.client_state_root
        if self.remove_client_state and root is not None and is_run_scoped(root, plan.run_id):
            run_state.remove(root)

    def _rounds(self, num_rounds: int, timeout: float | None):
        """Flower's round loop: fit, the strategy's central evaluation, the clients' federated evaluation (in due
        rounds, evaluation federated/both), then the strategy ends the round with one row holding both; starting
        after the checkpoint's round when the run resumes."""
        strategy = self.strategy
        start = strategy.plan.start_round
        self.parameters = strategy.initialize_parameters(self.client_manager())
        started = time.perf_counter()
        if start == 0:
            strategy.evaluate(0, self.parameters)
            strategy.end_round(0)
        for server_round in range(start + 1, num_rounds + 1):
            res = self.fit_round(server_round, timeout)
            if res is not None and res[0] is not None:
                self.parameters = res[0]
            strategy.evaluate(server_round, self.parameters)
            if strategy.plan.federated:
                self.evaluate_round(server_round, timeout)
            strategy.end_round(server_round)
        return History(), time.perf_counter() - started

    def _finish(self, status: str, reason: str) -> None:
        if self.recorder is not None and self.recorder.status == "running":
            log.error("fedsuite │ %s: %s", status, reason)
            if self.recorder.resume_command:
                log.error("fedsuite │ resume from the last checkpoint with: %s", self.recorder.resume_command)
            self.recorder.finish(status, reason)
        self._ended(status, reason)


class StopAwareRecorder(RunRecorder):
    """The ServerApp's RunRecorder, which a stop from outside cannot contradict: a failure recorded once the run's
    launch has begun to stop it (its stop note, fedsuite.run.stop_note) is recorded as `interrupted` with the stop's
    reason, the failure's kept after it (the stop killed the Ray workers before the ServerApp's process); and once
    the summary holds a final status, no later round of a ServerApp thread still running reopens it (no row, no
    `running` summary). Flower's exit handler (watch_flower_exit) writes from another thread, hence the lock."""

    def __init__(self, *args, **kwargs):
        self.lock = threading.RLock()
        self.thread = threading.get_ident()  # the ServerApp's thread
        super().__init__(*args, **kwargs)

    def record(self, row, status=None, reason=None) -> None:
        with self.lock:
            if self.status == "running":
                super().record(row, status, reason)

    def finish(self, status: str, reason: str | None = None) -> None:
        with self.lock:
            stop = stop_note() if status == "failed" and self.status == "running" else None
            if stop is not None:
                status, reason = "interrupted", f"{stop.reason} (the run then reported: {reason})"
            super().finish(status, reason)

    def write_summary(self, status: str, reason: str | None = None) -> None:
        with self.lock:
            if self.status == "running":
                super().write_summary(status, reason)


# flwr.supercore.exit.ExitCode: the codes Flower's process ends with when a signal stopped it
FLOWER_SIGNAL_EXITS = {1: "SIGINT", 2: "SIGQUIT", 3: "SIGTERM"}


def watch_flower_exit(recorder: StopAwareRecorder) -> None:
    """Have Flower's exit handlers record how its process ended while the summary still says `running`
    (flower_exit_outcome), before Flower's own clean-up and its forced exit. Without Flower's exit machinery
    (an in-process run) nothing is registered."""
    try:
        from flwr.supercore.exit import add_exit_handler
    except ImportError:
        return
    add_exit_handler(lambda: record_flower_exit(recorder, flower_exit_code()), run_before_force_exit=True)


def record_flower_exit(recorder: StopAwareRecorder, code: int | None) -> None:
    """Flower is ending the process with exit code `code` (None: unknown). Where the ServerApp runs in this same
    thread (a deployment's flwr-serverapp), the SystemExit that follows reaches RoundLoop.fit, which records
    it; else (the simulation's ServerApp thread) it is recorded here."""
    if threading.get_ident() == recorder.thread:
        return
    with recorder.lock:
        if recorder.status == "running":
            status, reason = flower_exit_outcome(code)
            log.error("fedsuite │ %s: %s", status, reason)
            recorder.finish(status, reason)


def flower_exit_outcome(code: int | None) -> tuple[str, str]:
    """(status, reason) of a run whose Flower process ends with `code` before the run did: the launch's stop when
    it left a note; a signal: interrupted; Flower's error codes (100 and above): failed."""
    stop = stop_note()
    if stop is not None:
        return "interrupted", stop.reason
    if code == 1:
        return "interrupted", ("stopped by Flower: SIGINT to its simulation process, which is how `flwr stop "
                               "<run-id>` (and a stopped SuperLink) end a run")  # fmt: skip
    if code in FLOWER_SIGNAL_EXITS:
        return "interrupted", f"stopped by {FLOWER_SIGNAL_EXITS[code]} to Flower's process that runs the ServerApp"
    if code is None:
        return "interrupted", "Flower ended the process that runs the ServerApp before the run ended"
    return "failed", (f"Flower's process that runs the ServerApp ended with exit code {code} before the run ended; "
                      "Flower's log says why (flwr.log, or `flwr log <run-id>`)")  # fmt: skip


def flower_exit_code() -> int | None:
    """The exit code Flower's flwr_exit is ending the process with, read from its frame (its exit handlers are called
    without arguments); None when not called from there."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "flwr_exit" and frame.f_globals.get("__name__", "").startswith("flwr."):
            code = frame.f_locals.get("code")
            return int(code) if isinstance(code, int) else None
        frame = frame.f_back
    return None
