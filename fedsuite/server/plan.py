"""What the Flower side of the server reads from the run config: a run's plan, made by fedsuite.server.compose.run_plan
for every surface (the suite's from its dataset, fedsuite/server/app.py; a user's app from their model,
fedsuite/app/server.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedsuite.results.folder import RunRecorder
from fedsuite.rules.server_rule import RuleSettings
from fedsuite.server.sampling import Sampler


def rule_settings(cfg, initial_x: np.ndarray) -> RuleSettings:
    """What a server rule reads from the run config `cfg` (a fedsuite.config.run_config.Config), starting from
    `initial_x`: the one place both the suite's ServerApp and fedsuite.app build it."""
    poisson_dp = cfg.privacy.on and cfg.sampling.mode == "bernoulli"
    expected = cfg.sampling.participation * cfg.sampling.num_clients if poisson_dp else None
    return RuleSettings(initial_x=initial_x, sampler=Sampler.of_run(cfg), lr=cfg.local.lr,
                        lr_decay=cfg.local.lr_decay, weighting=cfg.aggregation.weighting,
                        agg_scale=cfg.aggregation.agg_scale, expected_cohort=expected,
                        relaxed_init=cfg.local.relaxed_init)  # fmt: skip


@dataclass
class RunPlan:
    settings: RuleSettings  # what the algorithm's server rule reads
    num_rounds: int
    eval_every: int = 1
    evaluate: Callable[[np.ndarray], dict[str, Any]] | None = None  # central test set (evaluation central/both)
    validate: Callable[[np.ndarray], dict[str, Any]] | None = None  # central validation (val_loss, val_accuracy)
    federated: bool = False  # clients evaluate on their held-out data (evaluation federated/both)
    eval_clients: int = 0  # clients evaluating per round; 0 = the round's fit cohort
    seed: int = 0  # the run seed (draws the evaluating clients when eval-clients > 0)
    recorder: RunRecorder | None = None
    node_wait_seconds: float = 600.0
    min_replies: float = 0.5  # share of the cohort that must reply validly each round (0: any number, even none)
    divergence_factor: float = 100.0  # test loss above this × the initial loss = diverged (0: non-finite only)
    algorithm: str = ""  # sent to clients, which refuse to train for another algorithm
    # messages sent at once outside Flower's fit exchange (node discovery, a rule's query); the in-process runner
    # sets 1: Flower's payload decoding is not thread-safe there
    query_workers: int = 16
    client_mapping: str = "logical"  # or "fixed": one SuperNode per partition, found by asking each
    shares: int = 0  # logical mapping: the nodes a round's cohort goes to in blocks, one message each (0: spread)
    client_state_root: Path | None = None  # the run's client-state files (fedsuite.state.store.state_root), if any
    run_id: int = 0
    state_key: int = 0  # names node-held client-state folders: the first run's id, kept in checkpoints (resumes)
    checkpoint_every: int = 0  # rounds between checkpoints (fedsuite.results.checkpoint); 0 = none
    run_config: dict[str, Any] = field(default_factory=dict)  # the resolved run config, stored in checkpoints
    start_round: int = 0  # the checkpoint's round when resuming: rounds start after it
    resume: Any = None  # the fedsuite.results.checkpoint.Checkpoint to resume from
    initial_buffers: np.ndarray | None = None  # the model's floating-point buffers at start (None or empty: none)

    def evaluation_due(self, server_round: int) -> bool:
        """Rounds that are evaluated: 0 (central only), every eval-every rounds, the last."""
        return server_round == 0 or server_round % self.eval_every == 0 or server_round == self.num_rounds

    @property
    def initial_x(self) -> np.ndarray:
        return self.settings.initial_x

    @property
    def has_buffers(self) -> bool:
        """Whether the model has floating-point buffers (BatchNorm statistics)."""
        return self.initial_buffers is not None and self.initial_buffers.size > 0

    @property
    def sampler(self) -> Sampler:
        return self.settings.sampler
