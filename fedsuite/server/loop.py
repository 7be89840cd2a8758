"""Flower's round loop for a RuleStrategy, and the truth about how it ended.

Whatever ends the run early is written to summary.json before it propagates (a strategy's RunAborted has written its
own status; any other exception is `failed`, an interruption `interrupted`), so a results folder never says
`running` about a run that has stopped. A resumed run starts after the checkpoint's round.
"""

from __future__ import annotations

import logging
import shutil
import time

from flwr.server import History, Server
from flwr.server.client_manager import SimpleClientManager

from fedsuite import state
from fedsuite.pruning import PRUNED
from fedsuite.server.guard import RunAborted
from fedsuite.server.privacy import BUDGET_SPENT

log = logging.getLogger("flwr.fedsuite")


class RecordingServer(Server):
    """Flower's round loop, plus: whatever ends the run early is written to summary.json before it propagates
    (a strategy's RunAborted has written its own status; any other exception is `failed`, an interruption
    `interrupted`), so a results folder never says `running` about a run that has stopped."""

    def __init__(self, strategy, recorder, remove_client_state: bool = True):
        super().__init__(client_manager=SimpleClientManager(), strategy=strategy)
        self.recorder = recorder
        self.remove_client_state = remove_client_state

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
        """A per-run client-state folder (in RAM for client-state memory) goes with the run; checkpoints hold
        their own copies. A configured client-state-dir is the user's and stays."""
        plan = self.strategy.plan
        root = plan.client_state_root
        if self.remove_client_state and root is not None and state.is_run_scoped(root, plan.run_id):
            shutil.rmtree(root, ignore_errors=True)

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
        if self.recorder is not None:
            log.error("fedsuite │ %s: %s", status, reason)
            if self.recorder.resume_command:
                log.error("fedsuite │ resume from the last checkpoint with: %s", self.recorder.resume_command)
            self.recorder.finish(status, reason)
        self._ended(status, reason)
