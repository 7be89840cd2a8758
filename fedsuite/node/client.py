"""The one Flower `NumPyClient` of every algorithm: `RuleClient` wraps an algorithm's `ClientRule`
(fedsuite/rules/client_rule.py) and does everything Flower-shaped around it. `client_for(cfg, node)` builds both.

`fit`: decode the named downlink arrays and the fit config into a `RoundContext`, run the shared local loop with the
rule's update rule, return the rule's named uplink arrays, in three phases: `prepare` (everything before the loop),
`train` (the loop) and `finish` (everything after it). Every mechanism that cuts across the algorithms is one of the
client's round stages (fedsuite/stages/client.py; docs/developer/architecture.md#round-stages), called at fixed
points of both and named nowhere here: arrays sent beside the model, the round's start, arrays beside the upload,
refusals, what leaves, what the state keeps, the reply's metrics and example count. An engine that trains several
clients at once calls `prepare` and `finish` of each and trains their loops as one computation in between. A message
whose config names a query phase (fedsuite.rules.rounds.PHASE_KEY) is a server query instead: the rule's `answer`
goes back, nothing trains, no stage is called.

Client state: the server's acknowledgement (the last round it accepted this client's reply) comes first; the state
is saved only after the uplink is complete and finite, and a save the server then does not accept (a rejected or
lost reply) is undone at the client's next participation (`fedsuite.state.store`), so no client's state runs ahead of
the server's.

A fit or evaluation that fails (an exception, a non-finite uplink, a configuration mismatch) does not raise into
Flower: it returns an error reply (no arrays; metrics `error` = one line, `traceback` = the full text), which the
server rejects, logs in one line and writes to the run's clients.log. So the console is not flooded and the server
knows why.
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from flwr.client import NumPyClient

from fedsuite.codec.device_arrays import room_for, uplink_tensor
from fedsuite.codec.payload import (
    ALGORITHM_KEY,
    ARRAYS_KEY,
    PARTITION_KEY,
    STATE_ACCEPTED,
    STATE_KEY,
    names_of,
    pack,
    unpack,
)
from fedsuite.config.run_config import Config
from fedsuite.evaluation.metrics import batch_metrics
from fedsuite.local.adaptive import TRACKING_KEY, tracks
from fedsuite.local.device import to_device, to_host
from fedsuite.local.loop import LocalResult, LocalSettings, UpdateRule, train_local
from fedsuite.registry import known as registry
from fedsuite.rules.client_rule import ClientRule, RoundContext
from fedsuite.rules.rounds import PHASE_KEY
from fedsuite.stages.client import STEPS_KEY, ClientStage, handles_upload
from fedsuite.stages.client_run import client_stages

MAX_TRACEBACK_CHARS = 8000
# Fit-config entries the adapter decodes or reads itself; with its stages' (ClientStage.config_keys), the others are
# the server rule's (RoundContext.scalars).
DECODED_KEYS = frozenset(
    {"round", "lr", PHASE_KEY, TRACKING_KEY, ARRAYS_KEY, STATE_ACCEPTED, PARTITION_KEY, STATE_KEY, ALGORITHM_KEY}
    | {STEPS_KEY}
)


def round_context(config: Mapping, down: Mapping[str, torch.Tensor], partition_id: int,
                  decoded: frozenset[str] = DECODED_KEYS) -> RoundContext:  # fmt: skip
    """The RoundContext of a fit message: its config (Flower's wire scalars) less the `decoded` entries, and its
    decoded downlink arrays."""
    phase = config.get(PHASE_KEY)
    return RoundContext(
        round=int(config["round"]),
        lr=None if phase else float(config["lr"]),
        down=MappingProxyType(dict(down)),
        phase=str(phase) if phase else None,
        tracked=tracks(config, partition_id),
        scalars=MappingProxyType({k: v for k, v in config.items() if k not in decoded}),
    )


@dataclass(frozen=True)
class PreparedFit:
    """One fit message made ready for the local loop (`RuleClient.prepare`): what the loop and `finish` read."""

    config: Mapping  # the message's fit config
    ctx: RoundContext
    rule: UpdateRule  # this round's update rule, built by the algorithm's client rule
    x0: torch.Tensor  # x^t on the node's device
    steps: int  # K_i as the message says, else the run's (0: epoch mode)
    generator: torch.Generator  # minibatch order and augmentation of (seed, round, partition)
    private: Any  # the loop's gradient oracle a client stage gave (ClientStage.prepare), else None
    started: Mapping[ClientStage, Any] = field(default_factory=dict)  # what each stage's `start` kept (None: not kept)


def first_not_finite(arrays: Mapping[str, torch.Tensor]) -> str | None:
    """The name of the first array holding an inf or a NaN, or None. One sum per array in its own dtype and one device
    sync for the lot: an inf or a NaN makes its array's sum non-finite, so finite sums prove every entry finite. A
    non-finite sum (a NaN, an inf, or finite entries whose sum overflows) is settled entry by entry."""
    if not arrays:
        return None
    sums = torch.stack([v.detach().sum().to(torch.float64) for v in arrays.values()])
    if bool(torch.isfinite(sums).all()):
        return None
    return next((name for name, value in arrays.items() if not bool(torch.isfinite(value).all())), None)


def error_reply(partition_id: int, err: BaseException) -> dict:
    """The metrics of an error reply: the exception in one line, and its traceback (inside its `except` block, the
    traceback being handled; outside, the one it was raised with)."""
    message = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    details = "".join(traceback.format_exception(err))[-MAX_TRACEBACK_CHARS:]
    return {"partition-id": partition_id, "error": message, "traceback": details}


def _tensor(array: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A downlink array as a tensor on `device` that the client may write (see RuleClient._downlink); a tensor (the
    in-process engine's message kept on the device, fedsuite/server/placement.py) is copied there."""
    if isinstance(array, torch.Tensor):
        return array.to(device, copy=True)
    if array.flags.writeable:
        return torch.from_numpy(array).to(device)
    if device.type == "cpu":
        return torch.from_numpy(array.copy())
    with warnings.catch_warnings():  # torch warns of a tensor over read-only memory: it is only the copy's source
        warnings.simplefilter("ignore", UserWarning)
        return to_device(array, device)


class RuleClient(NumPyClient):
    """An algorithm's ClientRule behind Flower's NumPyClient API (module docstring)."""

    READ_ONLY_ARRAYS = True  # fit and evaluate copy what they keep: the in-process engines may pass read-only views
    keeps_uplink_on_device = False  # `finish` leaves the uplink on the device (fedsuite/codec/device_arrays.py)

    def __init__(self, client_rule: ClientRule, stages: list[ClientStage] | None = None):
        """`stages`: the client's round stages; by default those of its node's run config (`client_stages`)."""
        self.client_rule = client_rule
        self.node = client_rule.node
        self.stages = client_stages(self.node.cfg, client_rule) if stages is None else stages
        self.decoded_keys = DECODED_KEYS.union(*(stage.config_keys for stage in self.stages))

    @property
    def state(self):
        """The rule's client state (its declared vectors and the model's own, fedsuite.rules.declared), or None."""
        return self.client_rule.state

    # ---- Flower NumPyClient API ------------------------------------------------------------------
    def get_properties(self, config):
        return {"partition-id": self.node.partition_id, "num-partitions": self.node.num_partitions}

    def get_parameters(self, config):
        return [self.node.model.x.detach().cpu().numpy()]

    def fit(self, parameters, config):
        try:
            if config.get(PHASE_KEY):
                return self._answer(parameters, config)
            return self._train(parameters, config)
        except Exception as err:
            return [], 0, error_reply(self.node.partition_id, err)

    def evaluate(self, parameters, config):
        """The received global model (as the stages receive it) on this client's held-out test data, and on
        its validation share when it has one: eval mode, batches of eval-batch-size, no client state touched.
        Returns (test loss, test examples, {accuracy, val-loss, val-accuracy, n-val, partition-id}); an empty test
        split returns 0 examples and `empty`=1 (the server skips and counts it); a failure, an error reply."""
        try:
            return self._evaluate(parameters, config)
        except Exception as err:
            return 0.0, 0, error_reply(self.node.partition_id, err)

    # ---- one training round: prepare → train → finish ------------------------------------------------------
    def _train(self, parameters, config):
        fit = self.prepare(parameters, config)
        return self.finish(fit, self.train(fit), keep_on_device=False)  # NumPyClient's reply travels as arrays

    def prepare(self, parameters, config) -> PreparedFit:
        """Everything before the local loop: the state acknowledgement, the downlink decoded and received by the
        stages, the configuration check, the stages' start, the round's context and update rule, x^t (or the start
        a stage moved it to), K_i, the generator, the stages' oracle."""
        node, local = self.node, self.node.cfg.local
        if self.state is not None and STATE_ACCEPTED in config:
            self.state.accepted_round = int(config[STATE_ACCEPTED])
        torch.set_num_threads(local.client_threads)
        down = self._received(parameters, config, config[ARRAYS_KEY])
        started = {stage: kept for stage in self.stages if (kept := stage.start(down, node)) is not None}
        node.model.module.train()
        ctx = round_context(config, down, node.partition_id, self.decoded_keys)
        rule = self.client_rule.rule(ctx)
        if rule.batches is None and local.local_batches == "blocks":
            rule.batches = self.client_rule.blocks()
        private = self._oracle(ctx)
        steps = int(config.get(STEPS_KEY, local.steps))  # K_i when the server sends one
        return PreparedFit(config, ctx, rule, down["model"], steps, node.generator(ctx.round), private, started)

    def _oracle(self, ctx: RoundContext) -> Any:
        """The loop's gradient oracle for this round, from the one stage whose `prepare` gives one; None when none."""
        oracles = [(stage, oracle) for stage in self.stages if (oracle := stage.prepare(self.node, ctx)) is not None]
        if len(oracles) > 1:
            names = ", ".join(type(stage).__name__ for stage, _ in oracles)
            raise ValueError(f"client stages {names} each give the local loop a gradient oracle; it takes one")
        return oracles[0][1] if oracles else None

    def train(self, fit: PreparedFit) -> LocalResult:
        """This client's local loop alone (fedsuite.local.loop.train_local)."""
        node = self.node
        return train_local(
            node.model,
            fit.x0,
            node.data,
            node.loss_fn,
            fit.rule,
            settings=LocalSettings.of_round(node.cfg.local, fit.ctx.lr, fit.steps),
            generator=fit.generator,
            private=fit.private,
        )

    def finish(self, fit: PreparedFit, result: LocalResult, keep_on_device: bool | None = None):
        """Everything after the local loop: the stages' refusals, the uplink with the stages' arrays, its finiteness,
        the stages' release, what they keep, the state save, the packed arrays, the metrics and example count as the
        stages leave them; returns NumPyClient.fit's (arrays, examples, metrics). The arrays are float32 tensors left
        on the device (fedsuite/codec/device_arrays.py) where `keep_on_device` (default: the client's
        `keeps_uplink_on_device`, set by the engine that keeps replies in process) says so, no stage handles the
        upload (fedsuite.stages.client.handles_upload) and the device has room for it; else numpy arrays on the
        host."""
        node, config, ctx = self.node, fit.config, fit.ctx
        for stage in self.stages:  # before the rule's uplink moves any state
            stage.before_release(fit)
        uplink = self.client_rule.uplink(result, fit.rule, ctx)
        for stage in self.stages:
            uplink = {**uplink, **stage.uplink(result, fit, node)}
        bad = first_not_finite(uplink)
        if bad is not None:
            raise FloatingPointError(f"uplink array {bad!r} is not finite (diverged local training?)")
        uplink, released = self._release(uplink, fit)
        for stage in self.stages:
            stage.before_save(result, fit)
        if self.state is not None:
            self.state.save(ctx.round if STATE_ACCEPTED in config else None)
        keep = self.keeps_uplink_on_device if keep_on_device is None else keep_on_device
        if keep and not any(handles_upload(stage) for stage in self.stages) and room_for(uplink.values()):
            arrays, names = [uplink_tensor(v) for v in uplink.values()], names_of(uplink)
        else:
            arrays, names = pack({k: to_host(v) for k, v in uplink.items()})
        metrics = {
            ARRAYS_KEY: names,
            "partition-id": node.partition_id,
            "steps": result.steps,
            "lr": ctx.lr,
            "compute-seconds": result.seconds,
            "loss": result.mean_loss,
        }
        if result.first_loss is not None:  # the received model's loss before any step (the guard's reference)
            metrics["first-loss"] = result.first_loss
        examples = len(node.data)
        for stage in self.stages:
            metrics, examples = stage.metrics(metrics, fit), stage.num_examples(examples)
        return arrays, examples, {**metrics, **released}

    def _release(self, uplink: dict[str, torch.Tensor], fit: PreparedFit) -> tuple[dict, dict]:
        """The uplink as the stages release it, each from the previous one's arrays, and the metrics they add."""
        released: dict = {}
        for stage in self.stages:
            uplink, metrics = stage.release(uplink, fit, self.node)
            released.update(metrics)
        return uplink, released

    # ---- a server query (fedsuite.rules.rounds.Query) --------------------------------------------------
    def _answer(self, parameters, config):
        """The rule's answer to the query the config names: its arrays, finite, with the compute time; no client
        state is touched and nothing trains."""
        node = self.node
        torch.set_num_threads(node.cfg.local.client_threads)
        start = time.perf_counter()
        ctx = round_context(config, self._downlink(parameters, config[ARRAYS_KEY]), node.partition_id,
                            self.decoded_keys)  # fmt: skip
        answer = self.client_rule.answer(ctx)
        if answer is None:
            raise ValueError(f"algorithm={node.cfg['algorithm']!r} answers no server query, but was sent the query "
                             f"{PHASE_KEY}={ctx.phase!r}; give server and clients the same run config")  # fmt: skip
        bad = first_not_finite(answer)
        if bad is not None:
            raise FloatingPointError(f"{bad} is not finite")
        arrays, names = pack({k: to_host(v) for k, v in answer.items()})
        metrics = {ARRAYS_KEY: names, "partition-id": node.partition_id, "compute-seconds": time.perf_counter() - start}
        return arrays, len(node.data), metrics

    # ---- evaluation ------------------------------------------------------------------------------
    def _evaluate(self, parameters, config):
        node = self.node
        down = self._received(parameters, config, config.get(ARRAYS_KEY, "model"))
        node.model.x.copy_(down["model"])
        node.model.module.eval()
        batch, task = node.cfg.evaluation.eval_batch_size, node.shapes.task
        metrics: dict = {"partition-id": node.partition_id}
        validation = node.validation_data
        if validation is not None and len(validation):
            val_loss, val_accuracy = batch_metrics(node.model.module, validation.inputs, validation.targets,
                                                   node.loss_fn, task, batch)  # fmt: skip
            metrics.update({"val-loss": val_loss, "n-val": len(validation)})
            if val_accuracy is not None:
                metrics["val-accuracy"] = val_accuracy
        test = node.test_data
        if test is None or not len(test):
            metrics["empty"] = 1
            return 0.0, 0, metrics
        loss, accuracy = batch_metrics(node.model.module, test.inputs, test.targets, node.loss_fn, task, batch)
        if accuracy is not None:
            metrics["accuracy"] = accuracy
        return loss, len(test), metrics

    # ---- the wire ------------------------------------------------------------------------------------
    def _downlink(self, parameters, names) -> dict[str, torch.Tensor]:
        """The message's arrays by their names (fedsuite.codec.payload), as tensors on the node's device: a writable
        array is this message's own copy (Flower's decoding) and becomes the tensor, on the CPU without a copy more; a
        read-only one is a view of the message's bytes (the in-process engines, READ_ONLY_ARRAYS) and is copied, by the
        move to the device, or on the CPU into the client's own tensor."""
        device = self.node.device
        return {k: _tensor(v, device) for k, v in unpack(parameters, str(names)).items()}

    def _received(self, parameters, config, names) -> dict[str, torch.Tensor]:
        """The message's arrays once the stages took theirs (ClientStage.receive) and the configuration is checked."""
        down = self._downlink(parameters, names)
        for stage in self.stages:
            stage.receive(down, self.node)
        self._check_match(config, down)
        return down

    def _check_match(self, config, down: Mapping[str, torch.Tensor]) -> None:
        """Server and client must run the same algorithm and model: say so instead of failing on a shape."""
        cfg, server_algorithm = self.node.cfg, str(config.get(ALGORITHM_KEY, "") or "")
        if server_algorithm and server_algorithm != cfg["algorithm"]:
            raise ValueError(f"configuration mismatch: the server runs algorithm={server_algorithm!r}, this client "
                             f"algorithm={cfg['algorithm']!r}; give both the same run config")  # fmt: skip
        if down["model"].numel() != self.node.model.dim:
            raise ValueError(
                f"configuration mismatch: the server's model has {down['model'].numel():,} parameters, this client's "
                f"model={cfg.model!r} for dataset={cfg['dataset']!r} (its data: {self.node.dataset.input_shape}, "
                f"{self.node.dataset.num_classes} classes) has {self.node.model.dim:,}; check model, dataset and "
                "the node's data-dir"
            )


def client_for(cfg: Config, node) -> RuleClient:
    """The NumPyClient of `cfg`'s algorithm for `node`: its registered ClientRule (fedsuite.registry.known) wrapped."""
    return RuleClient(registry.build_client(cfg, node))
