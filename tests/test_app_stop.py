"""A ServerApp built on the public fedsuite.app surface records a stop as the suite's own apps do
(docs/reliability.md, How a stop is recorded): `flwr stop` cuts the ServerApp's thread off without an exception,
and Flower's exit handler writes `interrupted` into its results folder."""

from __future__ import annotations

import json
import threading

from torch import nn

from fedsuite import app as fedsuite_app
from fedsuite.server.loop import StopAwareRecorder, record_flower_exit


def test_the_app_surfaces_results_folder_records_flwr_stop(tmp_path):
    strategy = fedsuite_app.strategy(
        "fedavg", nn.Linear(4, 1), num_clients=2, clients_per_round=2, results=tmp_path / "run"
    )
    recorder = strategy.plan.recorder
    assert isinstance(recorder, StopAwareRecorder)
    fedsuite_app.server_components(strategy)  # registers the exit handler where Flower's exit machinery exists
    recorder.record({"round": 0, "loss": 1.0})
    thread = threading.Thread(target=record_flower_exit, args=(recorder, 1))  # Flower's main thread, SIGINT
    thread.start()
    thread.join()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "flwr stop" in summary["reason"], summary
