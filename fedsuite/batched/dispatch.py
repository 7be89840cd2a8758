"""A round's fit instructions → one reply per client, the round's clients trained in stacked groups.

Per instruction: the message's client is built as the ClientApp builds it (fedsuite/node/app.py) and prepared
(`RuleClient.prepare`); the prepared clients are grouped (fedsuite/batched/grouping.py); each group of two or more
trains as one `train_stacked` computation, the others one at a time (`RuleClient.train`); every client then finishes
on its own (`RuleClient.finish`). A group larger than one stacked computation holds trains in chunks, one
`train_stacked` call each (the memory plan, fedsuite/batched/chunks.py; batch-chunk). Failures stay per client: a
client whose prepare, training or finish raises is one error reply (fedsuite.node.client.error_reply), and a chunk
whose stacked training raises trains one at a time.
What the engine leaves to the ClientApp's own path (a message it cannot build, a server query, a run it does not
batch at all) goes through the proxy's `fit` unchanged. Each reason a client trains alone is logged once per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from flwr.common import Code, FitIns, FitRes, Status

from fedsuite.batched.chunks import GroupSample, MemoryPlan, Plan
from fedsuite.batched.grouping import NotBatchable, group_key, plan_shape
from fedsuite.batched.kept_steps import KeptSteps
from fedsuite.batched.loop import train_stacked
from fedsuite.batched.model import unbatchable_model
from fedsuite.local.device import one_move_per_array
from fedsuite.local.loop import LocalSettings
from fedsuite.node.client import PreparedFit, RuleClient, error_reply
from fedsuite.rules.rounds import PHASE_KEY
from fedsuite.server.wire import to_parameters

log = logging.getLogger("flwr.fedsuite")


@dataclass
class Member:
    """One client's fit instruction as the dispatcher takes it: how to build its client as the ClientApp would
    (`build()`, fedsuite.node.app.client_of; None: leave the member to `alone`), its arrays (read-only views do:
    prepare copies what it keeps) and config, and the ClientApp's own path for it (`alone()`: its reply, a
    NumPyClient.fit triple or a FitRes; it may raise, as a lost message does)."""

    build: Callable[[], RuleClient] | None
    arrays: Callable[[], list[np.ndarray]]
    config: Mapping[str, Any]
    alone: Callable[[], Any]


@dataclass
class _Fit:
    """One member on its way: its client and prepared fit, then its reply (NumPyClient.fit's triple)."""

    member: Member
    client: RuleClient | None = None
    fit: PreparedFit | None = None
    reply: tuple | None = None


def run_unbatched(client: RuleClient) -> str | None:
    """Why a whole run trains one client at a time, or None (decided before any client is prepared: a prepared
    client's buffers are loaded into the model the node's clients share): a client stage that trains alone
    (ClientStage.trains_alone: DP-SGD), or a model the stacked loop cannot run."""
    alone = next((stage.trains_alone for stage in client.stages if stage.trains_alone), None)
    return alone or unbatchable_model(client.node.model)


class BatchedDispatcher:
    """Trains a round's clients in stacked groups (module docstring); one per run (its log lines are once per run)."""

    def __init__(self):
        self.said: set[str] = set()
        self.stacked: list[int] = []  # the sizes of the chunks the last `train` trained stacked, in order
        self.memory = MemoryPlan()  # how many clients one stacked computation trains
        self.kept = KeptSteps()  # each kind of group's recorded step, kept for the run (fedsuite/batched/kept_steps.py)

    def say(self, reason: str) -> None:
        if reason not in self.said:
            self.said.add(reason)
            log.warning("fedsuite │ batch-clients: %s", reason)  # asked for, not given: a warning

    def note(self, reason: str) -> None:
        """Once per run, at info level: cuda-graphs is on but this rule's steps are not recorded (by design, not a
        failure: docs/running/batched.md#cuda-graphs)."""
        if reason not in self.said:
            self.said.add(reason)
            log.info("fedsuite │ cuda-graphs: %s", reason)

    def train(self, members: Sequence[Member]) -> list:
        """Every member's reply, in order: NumPyClient.fit's triple where the dispatcher trained it, else what its
        `alone()` returned, or the exception it raised."""
        items = [_Fit(member) for member in members]
        with one_move_per_array():  # the same downlink arrays moved to the device once (fedsuite/local/device.py)
            for item in items:
                self._prepare(item)
        groups: dict[tuple, list[_Fit]] = {}
        for item in items:
            if item.fit is None:
                continue
            try:
                groups.setdefault(group_key(item.client, item.fit), []).append(item)
            except Exception as err:  # NotBatchable says why; anything else is named
                why = str(err) if isinstance(err, NotBatchable) else f"grouping it raised {type(err).__name__}: {err}"
                self.say(f"{item.client.node.cfg['algorithm']} trains one client at a time: {why.splitlines()[0]}")
                self._alone(item)
        self.stacked = []  # this call's stacked chunks
        for key, group in groups.items():
            if len(group) == 1:
                self.say("a client whose K_i, minibatch sizes or rule no other client of its round shares trains alone")
                self._alone(group[0])
            else:
                self._together(key, group)
        return [_reply(item) for item in items]

    # ---- phases ---------------------------------------------------------------------------------------------
    def _prepare(self, item: _Fit) -> None:
        """Build the message's client as the ClientApp does and prepare it; anything the ClientApp's own path
        answers differently (a query, a refused node, a run that does not batch) is left to proxy.fit."""
        build, config = item.member.build, item.member.config
        if build is None or config.get(PHASE_KEY):
            return
        try:
            client = build()
        except Exception:  # the ClientApp's path turns it into its error reply, or Flower's failure
            return
        node = client.node
        reason = run_unbatched(client)
        if reason:
            self.say(f"{node.cfg['algorithm']} trains one client at a time: {reason}")
            return
        item.client = client
        try:
            item.fit = client.prepare(item.member.arrays(), config)  # views: prepare copies what it keeps
        except Exception as err:
            item.reply = ([], 0, error_reply(client.node.partition_id, err))

    def _alone(self, item: _Fit) -> None:
        try:
            item.reply = item.client.finish(item.fit, item.client.train(item.fit))
        except Exception as err:
            item.reply = ([], 0, error_reply(item.client.node.partition_id, err))

    def _together(self, key: tuple, group: list[_Fit]) -> None:
        """A group (`key`: its group_key) in the memory plan's chunks, each one stacked computation (a chunk of one
        client trains alone), one after another in the group's order. The plan is made again before each chunk for
        the clients left, with the memory free then (replies kept on the device take some); while that stays, the
        chunks are the first plan's (the even split of what is left is the rest of an even split)."""
        start = 0
        while start < len(group):
            size = self._plan(key, group[start:]).sizes[0]
            chunk, start = group[start : start + size], start + size
            if size == 1:
                self._alone(chunk[0])
            else:
                self.stacked.append(size)
                self._stacked(chunk)

    def _plan(self, key: tuple, group: list[_Fit]) -> Plan:
        """The group's chunks (fedsuite/batched/chunks.py), said once per run at info level: the first plan on a CUDA
        device, and the first that splits a group."""
        first, fit = group[0].client, group[0].fit
        node = first.node
        steps, batch = plan_shape(key[1])
        sample = GroupSample(
            node.model, fit.x0, node.data, node.loss_fn, fit.rule, _settings(group[0]), steps, batch, fit.private
        )
        batching = node.cfg.batching
        try:
            plan = self.memory.plan(len(group), batching.chunk, sample, key[1:], batching.cuda_graphs)
        except Exception as err:  # never worse than before chunks: the whole group, which falls back if it must
            plan = Plan([len(group)], f"the memory plan raised {type(err).__name__}: {err}".splitlines()[0][:300])
        for event, happened in (("plan", node.model.x.device.type == "cuda"), ("split", len(plan.sizes) > 1)):
            if happened and f"batch-chunk {event}" not in self.said:
                self.said.add(f"batch-chunk {event}")
                log.info("fedsuite │ batch-chunk: a group of %d clients trains in chunks of %s: %s", len(group),
                         plan.sizes, plan.why)  # fmt: skip
        return plan

    def _stacked(self, group: list[_Fit]) -> None:
        """One chunk as one `train_stacked` computation, each client then finished on its own; a chunk whose
        stacked training raises trains one at a time."""
        first = group[0].client
        try:
            results = train_stacked(
                first.node.model,
                [item.fit.x0 for item in group],
                [item.client.node.data for item in group],
                first.node.loss_fn,
                [item.fit.rule for item in group],
                settings=_settings(group[0]),
                generators=[item.fit.generator for item in group],
                cuda_graphs=bool(first.node.cfg["cuda-graphs"]),
                on_graph_failure=lambda why: self.say(
                    f"a group's step could not be recorded as a CUDA graph ({why}); it ran step by step"
                ),
                on_not_recorded=lambda why: self.note(f"{first.node.cfg['algorithm']}'s steps run one by one: {why}"),
                privates=None if group[0].fit.private is None else [item.fit.private for item in group],
                kept=self.kept,
            )
        except Exception as err:
            message = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            self.say(f"a group's stacked training raised {message}; its clients train one at a time")
            for item in group:  # from a fresh generator: the stacked attempt may have drawn minibatches already
                item.fit = replace(item.fit, generator=item.client.node.generator(item.fit.ctx.round))
                self._alone(item)
            return
        for item, result in zip(group, results, strict=True):
            try:
                item.reply = item.client.finish(item.fit, result)
            except Exception as err:
                item.reply = ([], 0, error_reply(item.client.node.partition_id, err))


def _settings(item: _Fit) -> LocalSettings:
    """The round's local settings as the item's client trains with them (its η_l and K_i)."""
    return LocalSettings.of_round(item.client.node.cfg.local, item.fit.ctx.lr, item.fit.steps)


def _reply(item: _Fit):
    """The item's reply: the dispatcher's triple, else the member's own path's reply or the exception it raised."""
    if item.reply is not None:
        return item.reply
    try:
        return item.member.alone()
    except Exception as err:
        return err


def flower_results(instructions: Sequence[tuple[Any, FitIns]], replies: Sequence) -> tuple[list, list]:
    """The dispatcher's replies to `instructions` as Flower's fit_clients returns them: (results, failures), in
    instruction order; an exception is a failure, as a message lost outside the client's fit."""
    results, failures = [], []
    for (proxy, _), reply in zip(instructions, replies, strict=True):
        if isinstance(reply, BaseException):
            failures.append(reply)
            continue
        res = reply if isinstance(reply, FitRes) else _fit_res(reply)
        (results if res.status.code == Code.OK else failures).append((proxy, res))
    return results, failures


def _fit_res(reply: tuple) -> FitRes:
    """NumPyClient.fit's triple as Flower's NumPyClient wrapper turns it into a FitRes (the same bytes, in one copy:
    fedsuite/server/wire.py)."""
    arrays, examples, metrics = reply
    return FitRes(Status(Code.OK, "Success"), to_parameters(arrays), examples, metrics)
