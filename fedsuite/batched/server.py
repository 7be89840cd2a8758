"""The in-process round loop with batch-clients=true: Flower's fit round, its clients trained by the batched
dispatcher (fedsuite/batched/dispatch.py) instead of one `fit` per proxy; everything else is RecordingServer's."""

from __future__ import annotations

from logging import INFO

from flwr.common.logger import log as flwr_log

from fedsuite.batched.dispatch import BatchedDispatcher
from fedsuite.server.loop import RecordingServer


class BatchedServer(RecordingServer):
    """RecordingServer whose fit round hands all of a round's fit instructions to one BatchedDispatcher."""

    def __init__(self, strategy, recorder, remove_client_state: bool = True):
        super().__init__(strategy, recorder, remove_client_state)
        self.dispatcher = BatchedDispatcher()

    def fit_round(self, server_round: int, timeout: float | None):
        instructions = self.strategy.configure_fit(
            server_round=server_round, parameters=self.parameters, client_manager=self.client_manager()
        )
        if not instructions:
            flwr_log(INFO, "configure_fit: no clients selected, cancel")
            return None
        flwr_log(INFO, "configure_fit: strategy sampled %s clients (out of %s)", len(instructions),
                 self.client_manager().num_available())  # fmt: skip
        results, failures = self.dispatcher.fit_round(instructions, server_round, timeout)
        flwr_log(INFO, "aggregate_fit: received %s results and %s failures", len(results), len(failures))
        parameters, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        return parameters, metrics, (results, failures)
