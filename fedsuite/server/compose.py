"""The server-side pieces of a run that the composition root (fedsuite/run/compose.py) puts together: the plan of a run
from its resolved config and the pieces that differ by surface, and the strategy from the plan. The suite's ServerApp
and the in-process engine (fedsuite/server/app.py: x⁰ and evaluation from the run's dataset, its results folder, its
client-state plan, a checkpoint to resume) and `fedsuite.app` (fedsuite/app/server.py: x⁰ and evaluation from the
user's model) both go through here, so what a run reads from its config is written once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from fedsuite.batched.notice import why_not_shared
from fedsuite.config.schema import ConfigError
from fedsuite.privacy.checks import count_noise
from fedsuite.privacy.model_checks import averaged_buffers_refusal
from fedsuite.privacy.noise import warn_if_seeded
from fedsuite.registry import known as registry
from fedsuite.results import checkpoint
from fedsuite.server.adapter import RuleStrategy
from fedsuite.server.observers import RoundObserver
from fedsuite.server.plan import RunPlan, rule_settings
from fedsuite.server.privacy import ServerPrivacy
from fedsuite.server.stages import server_stages


def run_plan(cfg, initial_x: np.ndarray, initial_buffers: np.ndarray | None = None, **pieces: Any) -> RunPlan:
    """The plan of a run with resolved config `cfg` (a fedsuite.config.run_config.Config) starting from `initial_x`
    and the model's `initial_buffers` (fedsuite.models.networks.start_vectors): every field the config decides, then
    `pieces` (evaluate, validate, recorder, the client-state folder and keys, a checkpoint to resume, client_mapping)
    as the surface provides them."""
    has_buffers = initial_buffers is not None and initial_buffers.size > 0
    run, evaluation = cfg.run_control, cfg.evaluation
    decided = dict(
        settings=rule_settings(cfg, initial_x),
        num_rounds=run.num_rounds,
        eval_every=evaluation.eval_every,
        federated=evaluation.federated,
        eval_clients=evaluation.eval_clients,
        seed=cfg.seed,
        min_replies=run.min_replies,
        divergence_factor=run.divergence_factor,
        algorithm=cfg.algorithm,
        client_mapping=run.client_mapping,
        shares=batch_shares(cfg, has_buffers),
        checkpoint_every=run.checkpoint_every,
        run_config=dict(cfg),
        initial_buffers=initial_buffers,
    )
    return RunPlan(**{**decided, **pieces})


def batch_shares(cfg, has_buffers: bool = False) -> int:
    """How many nodes a round's cohort goes to in blocks, one share message each (batch-clients=true and nothing
    that keeps the clients apart, fedsuite.batched.notice.why_not_shared; docs/running/batched.md#under-flwr-run),
    else 0 (one message per client)."""
    if not cfg.batching.clients or why_not_shared(cfg, has_buffers):
        return 0
    return cfg.batching.messages


def server_privacy(cfg, rule, buffers: np.ndarray | None) -> ServerPrivacy | None:
    """The server's half of client-level DP when the run asks for it (dp != 'off'), else None. Refused here, before
    any training, what only the built model and rule show: buffers the server would average, a rule that queries."""
    privacy = cfg.privacy
    if not privacy.on:
        return None
    if buffers is not None:
        raise ConfigError(averaged_buffers_refusal(privacy.mode, cfg.model))
    if rule.query is not None:
        raise ConfigError(f"dp={privacy.mode!r}: algorithm={cfg.algorithm!r} asks its clients a query before "
                          "training, an upload the joint clip does not bound")  # fmt: skip
    sampling = cfg.sampling
    poisson = sampling.participation if sampling.mode == "bernoulli" else None
    return ServerPrivacy(privacy, cfg.num_clients, sampling.clients_per_round, cfg.seed, count_noise(cfg), poisson,
                         cfg.local.steps)  # fmt: skip


def averaged_buffers(cfg, plan: RunPlan) -> np.ndarray | None:
    """The model's initial buffers when the server averages them (buffers='average'), else None (none, or kept by
    the clients)."""
    return plan.initial_buffers.copy() if cfg.buffers == "average" and plan.has_buffers else None


def compose_strategy(
    cfg,
    plan: RunPlan,
    observers: Iterable[RoundObserver] = (),
    strategy_class: type[RuleStrategy] = RuleStrategy,
    **strategy_args: Any,
) -> RuleStrategy:
    """The algorithm's server rule as a Flower strategy (`strategy_class`) for `plan`, with the run's round stages and
    the model's buffers when the server averages them. Set to the checkpoint's state when the plan resumes one."""
    rule = registry.build_rule(cfg, plan.settings)
    warn_if_seeded(cfg)  # reproducible DP noise is not private: said once per run (docs/privacy.md)
    buffers = averaged_buffers(cfg, plan)
    privacy = server_privacy(cfg, rule, buffers)
    strategy = strategy_class(rule, plan, observers, stages=server_stages(cfg, privacy, buffers), **strategy_args)
    if plan.resume is not None:
        checkpoint.restore(strategy, plan.resume, plan.client_state_root)
    return strategy
