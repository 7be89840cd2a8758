"""The server half for a user's Flower app: a fedsuite algorithm's server rule as a Flower Strategy.

Put together by the suite's composition root (fedsuite/run/compose.py) from a RunPlan made of the user's model: the
registry's rule (strategies/) with its hyper-parameters from the settings, the run's round stages and
fedsuite.server.adapter.RuleStrategy (routing, reply validation, the run guard, the per-round row), and the round loop
server_components hands Flower. x^0 is the user's model's trainable parameters (fedsuite.models.networks.start_vectors,
as every client takes it), its floating-point buffers (BatchNorm statistics) are averaged beside the rule unless
buffers='local'. Each SuperNode is one partition: client-mapping='fixed', found by asking every node once for the
partition-id it was started with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.server import ServerAppComponents

from fedsuite.app.node import evaluation_copy
from fedsuite.app.settings import SETTINGS_KEY, run_config, shared_settings
from fedsuite.config.run_config import Config, ConfigError
from fedsuite.models.networks import start_vectors, trainable
from fedsuite.run.compose import Engine, compose_run, flower_components, round_loop
from fedsuite.server.adapter import RuleStrategy
from fedsuite.server.compose import run_plan
from fedsuite.server.loop import StopAwareRecorder, watch_flower_exit
from fedsuite.server.observers import RoundObserver

Evaluate = Callable[[torch.nn.Module], Mapping[str, float]]


class AppStrategy(RuleStrategy):
    """RuleStrategy that also tells every client the settings it must share with the server (SETTINGS_KEY), so a
    client made with other settings refuses to train (one line naming the keys) instead of training differently;
    and that ends each round itself (its row, the guard's test-loss check) once its last evaluation is in: the central
    one, or with evaluation federated/both the clients' (or at once when none is due), so that it runs the same
    under Flower's own Server as under fedsuite's round loop (which ends the round again: a no-op)."""

    def __init__(self, *args, shared: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.shared = shared
        self._ended: set[int] = set()

    def evaluate(self, server_round, parameters):
        result = super().evaluate(server_round, parameters)
        if server_round == 0 or not self.plan.federated:  # round 0 is never evaluated by the clients
            self.end_round(server_round)
        return result

    def configure_evaluate(self, server_round, parameters, client_manager):
        instructions = super().configure_evaluate(server_round, parameters, client_manager)
        if self.plan.federated and not instructions:  # not due, or no node: no aggregate_evaluate follows
            self.end_round(server_round)
        return instructions

    def aggregate_evaluate(self, server_round, results, failures):
        aggregated = super().aggregate_evaluate(server_round, results, failures)
        if self.plan.federated:
            self.end_round(server_round)
        return aggregated

    def end_round(self, server_round: int) -> None:
        if server_round not in self._ended:  # fedsuite's loop ends the round again after evaluate
            self._ended.add(server_round)
            super().end_round(server_round)

    def configure_fit(self, server_round, parameters, client_manager):
        instructions = super().configure_fit(server_round, parameters, client_manager)
        for _, ins in instructions:
            ins.config[SETTINGS_KEY] = self.shared
        return instructions


class CentralEvaluation:
    """The user's `evaluate(module) -> metrics` called on a copy of their model holding the global parameters (and
    averaged buffers), in eval mode without gradients; metrics must be numbers (a 'loss' feeds the run guard)."""

    def __init__(self, module: torch.nn.Module, evaluate: Evaluate):
        self.model, self.evaluate = evaluation_copy(module), evaluate

    def __call__(self, x: np.ndarray, buffers: np.ndarray | None = None) -> dict[str, float]:
        model = self.model
        model.x.copy_(torch.as_tensor(x, device=model.device))
        if buffers is not None:
            model.buffers.copy_(torch.as_tensor(buffers, device=model.device))
        model.module.eval()
        with torch.no_grad():
            metrics = self.evaluate(model.module)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"evaluate returned {type(metrics).__name__}; return a dict of metrics such as "
                            "{'loss': 0.5, 'accuracy': 0.8}")  # fmt: skip
        return {str(k): float(v) for k, v in metrics.items()}


def strategy(algorithm: str, model: torch.nn.Module, *, evaluate: Evaluate | None = None,
             results: str | Path | None = None, observers: tuple[RoundObserver, ...] = (), **settings: Any
             ) -> RuleStrategy:  # fmt: skip
    """The Flower Strategy that runs `algorithm` (a registry name, plug-ins included) from `model`'s parameters.

    `settings`: run-config keys as keywords (`lr=0.05`, `clients_per_round=5` is 'clients-per-round'), checked by
    fedsuite.config.run_config.resolve; `num_clients` (the number of SuperNodes, one partition each) is required.
    `evaluate`: optional `evaluate(module) -> {'loss': …, 'accuracy': …}` called on the global model every `eval_every`
    rounds and after the last (evaluation='central', the default, or 'both'); with evaluation='federated' or 'both' the
    clients evaluate on their client(test=...) data in those rounds (the round's cohort, or `eval_clients` drawn by
    seed); `results`: optional folder for the run's rounds.jsonl, rounds.csv and summary.json (an existing run there is
    refused unless overwrite=True); `observers`: fedsuite round observers (tracking, checks)."""
    if "num_clients" not in settings and "num-clients" not in settings:
        raise ConfigError("num_clients: give the number of partitions, one per SuperNode (their --node-config "
                          "num-partitions)")  # fmt: skip
    cfg = run_config(algorithm, settings)
    evaluation = cfg.evaluation
    if evaluate is not None and not evaluation.central:
        raise ConfigError("evaluate: evaluation='federated' runs no central evaluation; use evaluation='both' or "
                          "leave evaluate out")  # fmt: skip
    if evaluate is None and evaluation.mode == "both":
        raise ConfigError("evaluation='both': give strategy(evaluate=...) for the central half, or use 'federated'")
    x0, buffers = initial_state(model)
    plan = run_plan(
        cfg,
        x0,
        buffers,
        evaluate=CentralEvaluation(model, evaluate) if evaluate is not None else None,
        recorder=_recorder(cfg, results, model, x0) if results is not None else None,
        client_mapping="fixed",  # one SuperNode per partition
    )
    return compose_run(cfg, plan, Engine(), observers, AppStrategy, shared=shared_settings(cfg)).strategy


def server_components(strategy: RuleStrategy) -> ServerAppComponents:
    """What a ServerApp's server_fn returns for `strategy`: the composition root's round loop for it (which writes the
    results folder's final status also when the run fails) and the number of rounds and round timeout of its
    settings."""
    cfg = Config(strategy.plan.run_config)
    if strategy.plan.recorder is not None:  # `flwr stop`, a signal: recorded, though no exception reaches the loop
        watch_flower_exit(strategy.plan.recorder)
    return flower_components(cfg, round_loop(cfg, strategy, Engine()))


def initial_state(model: torch.nn.Module) -> tuple[np.ndarray, np.ndarray]:
    """(x^0, the initial floating-point buffers) of the user's module, flat float32 (start_vectors)."""
    if not trainable(model):
        raise ConfigError("model: it has no trainable parameter (every requires_grad is False): nothing to federate")
    x0, buffers = start_vectors(model)
    return x0.numpy(), buffers.numpy()


def _recorder(cfg: Config, results: str | Path, model: torch.nn.Module, x0: np.ndarray) -> StopAwareRecorder:
    import flwr

    meta = {
        "model": f"{type(model).__module__}.{type(model).__qualname__}",
        "num_parameters": int(x0.size),
        "versions": {"flwr": flwr.__version__, "torch": torch.__version__, "numpy": np.__version__},
        "surface": "fedsuite.app",
    }
    folder = Path(results).expanduser().absolute()
    return StopAwareRecorder(folder, dict(cfg), meta, cfg.targets, cfg.run_control.num_rounds, cfg.output.overwrite,
                       target_column=cfg.evaluation.target_column, initial_model=x0)  # fmt: skip
