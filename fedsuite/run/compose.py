"""The composition root of a run: from the resolved config and the run's plan, one function (compose_run) builds the
server rule, the round stages, the strategy, the client-state plan and the round loop, for every surface: the
ServerApp under `flwr run` and in a deployment (fedsuite/server/app.py), the in-process engine
(fedsuite/run/inprocess.py) and a user's own Flower app (fedsuite/app/server.py).

The plan, x⁰ in it, is the one thing a surface makes itself (fedsuite.server.compose.run_plan): from the run's dataset
and the model the run config names, or from the user's model; x⁰ comes from fedsuite.models.networks.start_vectors
either way, the function every client takes it from too.

The round loop is always fedsuite.server.loop.RoundLoop; the run config and the engine pick its fit round, in
fit_round_for and nowhere else:

| run | engine | fit round |
|---|---|---|
| secagg=true | Flower's messaging | SecAggPlusRound: Flower's SecAgg+ workflow (fedsuite/server/secure.py) |
| secagg=true | in process | SecureSumRound: SecAgg+'s arithmetic (fedsuite/run/secagg_arithmetic.py) |
| batch-clients=true, shares | Flower's, or in process with messages | SharedRound (fedsuite/batched/server.py) |
| batch-clients=true | in process, no messages | BatchedRound: the batched dispatcher (fedsuite/batched/server.py) |
| anything else | any | FitRound: Flower's own (fedsuite/server/loop.py) |

"Shares" is the plan's: batch-clients=true with nothing that keeps the clients apart (fedsuite.batched.notice,
docs/running/batched.md#under-flwr-run).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from flwr.common import Context
from flwr.server import ServerAppComponents, ServerConfig

from fedsuite.batched.notice import say_unbatched, why_not_shared
from fedsuite.batched.server import BatchedRound, SharedRound
from fedsuite.config.run_config import Config, ConfigError
from fedsuite.run.secagg_arithmetic import SecureSumRound
from fedsuite.server.adapter import RuleStrategy
from fedsuite.server.compose import compose_strategy
from fedsuite.server.loop import FitRound, RoundLoop
from fedsuite.server.observers import RoundObserver
from fedsuite.server.plan import RunPlan
from fedsuite.server.secure import SecAggPlusRound
from fedsuite.state.plan import StatePlan, state_plan


@dataclass(frozen=True)
class Engine:
    """What carries a run's messages: Flower (a ServerApp under `flwr run`, a deployment, a user's own app; `context`:
    the ServerApp's Context, which SecAgg+'s workflow needs), or this process (fedsuite.run.inprocess: `messages`,
    with batch-clients=true each node's share of a round in one message as under `flwr run` instead of the batched
    dispatcher; `keep_client_state`, a per-run client-state folder left for the caller to inspect)."""

    in_process: bool = False
    context: Context | None = field(default=None, compare=False)
    messages: bool = True
    keep_client_state: bool = False

    @classmethod
    def local(cls, messages: bool = False, keep_client_state: bool = False) -> Engine:
        return cls(in_process=True, messages=messages, keep_client_state=keep_client_state)


@dataclass
class ComposedRun:
    """One run, put together: its config, plan (x⁰ in it), strategy (the rule and the round stages in it), the
    client-state plan, and the round loop (made when first asked for: a user's app may hand the strategy to a
    Server of its own)."""

    cfg: Config
    plan: RunPlan
    strategy: RuleStrategy
    engine: Engine

    @property
    def rule(self):
        return self.strategy.rule

    @property
    def stages(self) -> list:
        return self.strategy.stages

    @property
    def x0(self) -> np.ndarray:
        return self.plan.initial_x

    @cached_property
    def client_state(self) -> StatePlan:
        buffers = self.plan.initial_buffers
        return state_plan(self.cfg, int(self.x0.size), 0 if buffers is None else int(buffers.size))

    @cached_property
    def loop(self) -> RoundLoop:
        return round_loop(self.cfg, self.strategy, self.engine)

    def components(self) -> ServerAppComponents:
        """What a ServerApp's server_fn returns for this run."""
        return flower_components(self.cfg, self.loop)


def compose_run(cfg: Config, plan: RunPlan, engine: Engine = Engine(), observers: Iterable[RoundObserver] = (),
                strategy_class: type[RuleStrategy] = RuleStrategy, **strategy_args: Any) -> ComposedRun:  # fmt: skip
    """The run of `cfg` from `plan` on `engine`: the registry's rule with the run's round stages as a Flower strategy
    (`strategy_class` with `strategy_args`, fedsuite.server.compose.compose_strategy) watched by `observers`, and its
    round loop. In process every exchange is one client at a time (deterministic), and without messages no node
    carries a block of a round (the dispatcher takes the whole round)."""
    if engine.in_process:
        plan.query_workers = 1
        if not engine.messages:
            plan.shares = 0
    strategy = compose_strategy(cfg, plan, observers, strategy_class, **strategy_args)
    return ComposedRun(cfg, plan, strategy, engine)


def round_loop(cfg: Config, strategy: RuleStrategy, engine: Engine = Engine()) -> RoundLoop:
    """The round loop of a run of `cfg` with `strategy` on `engine`: RoundLoop with the fit round fit_round_for
    picks (in process: Flower's thread pool with one worker, so a run is deterministic)."""
    keep = engine.keep_client_state
    loop = RoundLoop(strategy, strategy.plan.recorder, fit_round_for(cfg, strategy.plan, engine), not keep)
    if engine.in_process:
        loop.set_max_workers(1)
    return loop


def fit_round_for(cfg: Config, plan: RunPlan, engine: Engine) -> FitRound:
    """The round loop's fit round for a run of `cfg` with `plan` on `engine` (the module docstring's table), with one
    line where batch-clients=true is set but the clients train one at a time."""
    if cfg.secagg.on:
        if engine.in_process:
            say_unbatched(cfg, "secagg=true sums each client's upload as it arrives")
            return SecureSumRound(cfg.secagg, cfg.seed)
        if engine.context is None:
            raise ConfigError("secagg=true needs the ServerApp's Context (Flower's SecAgg+ workflow reads it)")
        say_unbatched(cfg, why_not_shared(cfg, plan.has_buffers))
        return SecAggPlusRound(cfg.secagg, engine.context)
    if plan.shares:
        return SharedRound()
    if engine.in_process and not engine.messages and cfg.batching.clients:
        return BatchedRound()
    say_unbatched(cfg, why_not_shared(cfg, plan.has_buffers))
    return FitRound()


def flower_components(cfg: Config, loop: RoundLoop) -> ServerAppComponents:
    """What a ServerApp's server_fn returns: `loop`, and the run's number of rounds and round timeout."""
    run = cfg.run_control
    return ServerAppComponents(
        server=loop, config=ServerConfig(num_rounds=run.num_rounds, round_timeout=run.round_timeout or None)
    )
