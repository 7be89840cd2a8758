"""The client half every algorithm shares, a Flower `NumPyClient`.

`fit`: decode the named downlink arrays, run the shared local loop with the algorithm's update rule,
return the named uplink arrays. An algorithm subclass only says which persistent state it keeps
(`state_specs`, fedsuite.declared), which rule the round trains with (`rule`) and what goes back (`uplink`, which
receives the rule the round built, so stages it reads afterwards, e.g. an Adam stage's final v, are named in
`rule.parts`, never kept on `self`). Stateful algorithms read and write `self.state` (this partition's declared
vectors, loaded lazily from the node's store); it is saved only after the uplink is complete and finite, and a save
the server then does not accept (a rejected or lost reply) is undone at the client's next participation
(`fedsuite.state`), so no client's state runs ahead of the server's.

The model's buffers (BatchNorm statistics) are handled here, beside every algorithm: with buffers='average' the
client starts from the server's (the downlink array `buffers`) and returns its own after training (an extra uplink
array the server averages outside the rule); with buffers='local' they are this client's declared state
(`fedsuite.declared.model_state`). No algorithm hook sees them.

A fit that fails (an exception, a non-finite uplink) does not raise into Flower: it returns an error reply
(no arrays; metrics `error` = one line, `traceback` = the full text), which the server rejects, logs in one line
and writes to the run's clients.log. So the console is not flooded and the server knows why.
"""

from __future__ import annotations

import traceback

import torch
from flwr.client import NumPyClient

from fedsuite.config import Config
from fedsuite.declared import BUFFERS, StateSpec, model_state
from fedsuite.evaluation import batch_metrics
from fedsuite.local import LocalResult, Transform, UpdateRule, prox_terms, train_local
from fedsuite.node import ClientNode
from fedsuite.payload import ALGORITHM_KEY, ARRAYS_KEY, STATE_ACCEPTED, pack, unpack
from fedsuite.variance import FixedBlocks

MAX_TRACEBACK_CHARS = 8000


class FedClient(NumPyClient):
    def __init__(self, node: ClientNode):
        self.node = node
        specs = self.state_specs(node.cfg) + model_state(node.cfg.buffers)
        self.state = node.client_state(specs) if specs else None

    # ---- algorithm hooks -------------------------------------------------------------------------
    @classmethod
    def state_specs(cls, cfg: Config) -> tuple[StateSpec, ...]:
        """The persistent vectors each client of this algorithm keeps under `cfg` (none: stateless)."""
        return ()

    def rule(self, down: dict[str, torch.Tensor], config: dict) -> UpdateRule:
        return UpdateRule()

    def uplink(self, result: LocalResult, rule: UpdateRule, down: dict[str, torch.Tensor], config: dict
               ) -> dict[str, torch.Tensor]:  # fmt: skip
        return {"delta": result.x - result.x0}

    # ---- helpers for algorithms ------------------------------------------------------------------
    def blocks(self) -> FixedBlocks:
        """This client's M fixed data blocks (`losac-blocks`, docs/algorithms/losac.md)."""
        node = self.node
        return FixedBlocks(len(node.data), node.cfg.local.blocks, node.cfg.seed, node.partition_id)

    def prox_terms(self, mu: float, centre: torch.Tensor | None = None) -> tuple[tuple[Transform, ...], ...]:
        """(clipped, unclipped) halves of + μ(x − centre) under the run's clip-scope (fedsuite.local.prox_terms)."""
        return prox_terms(mu, centre, self.node.cfg.local.clip_scope)

    # ---- Flower NumPyClient API ------------------------------------------------------------------
    def get_properties(self, config):
        return {"partition-id": self.node.partition_id, "num-partitions": self.node.num_partitions}

    def get_parameters(self, config):
        return [self.node.model.x.detach().cpu().numpy()]

    def fit(self, parameters, config):
        try:
            return self._fit(parameters, config)
        except Exception as err:
            message = f"{type(err).__name__}: {err}".splitlines()[0][:500]
            details = traceback.format_exc()[-MAX_TRACEBACK_CHARS:]
            return [], 0, {"partition-id": self.node.partition_id, "error": message, "traceback": details}

    def _fit(self, parameters, config):
        node, local = self.node, self.node.cfg.local
        if self.state is not None and STATE_ACCEPTED in config:
            self.state.accepted_round = int(config[STATE_ACCEPTED])
        torch.set_num_threads(local.client_threads)
        down = {k: torch.tensor(v, device=node.device) for k, v in unpack(parameters, str(config[ARRAYS_KEY])).items()}
        self._load_buffers(down.pop(BUFFERS.name, None))
        self._check_match(config, down)
        node.model.module.train()
        lr = float(config["lr"])
        rule = self.rule(down, config)
        if rule.batches is None and local.local_batches == "blocks":
            rule.batches = self.blocks()
        result = train_local(
            node.model,
            down["model"],
            node.data,
            node.loss_fn,
            rule,
            lr=lr,
            weight_decay=local.weight_decay,
            clip_norm=local.clip_norm,
            loss_reduction=local.loss_reduction,
            epochs=local.epochs,
            steps=local.steps,
            batch_size=local.batch_size,
            generator=node.generator(int(config["round"])),
        )
        uplink = {**self.uplink(result, rule, down, config), **self._buffers_uplink()}
        for name, value in uplink.items():
            if not bool(torch.isfinite(value).all()):
                raise FloatingPointError(f"uplink array {name!r} is not finite (diverged local training?)")
        if self.state is not None:
            self.state.save(int(config["round"]) if STATE_ACCEPTED in config else None)
        arrays, names = pack({k: v.detach().cpu().numpy() for k, v in uplink.items()})
        metrics = {
            ARRAYS_KEY: names,
            "partition-id": node.partition_id,
            "steps": result.steps,
            "lr": lr,
            "loss": result.mean_loss,
            "compute-seconds": result.seconds,
        }
        if result.first_loss is not None:  # the received model's loss before any step (the run guard's reference)
            metrics["first-loss"] = result.first_loss
        return arrays, len(node.data), metrics

    def _load_buffers(self, sent: torch.Tensor | None) -> None:
        """The buffers this round trains from: the server's (buffers='average'), this client's own (buffers='local',
        the initial ones before its first round); buffer-free models have none."""
        node = self.node
        buffers = node.model.buffers
        if not buffers.numel():
            return
        if node.cfg.buffers == "local":
            has = self.state is not None and self.state.has(BUFFERS.name)
            buffers.copy_(self.state.get(BUFFERS.name) if has else node.initial_buffers())
        elif sent is not None:
            buffers.copy_(sent)
        else:
            raise ValueError("configuration mismatch: the model has buffers but the server sent none; give server and "
                             "clients the same model and buffers setting")  # fmt: skip

    def _buffers_uplink(self) -> dict[str, torch.Tensor]:
        """buffers='average': the trained buffers go back beside the algorithm's arrays; 'local': they are kept."""
        buffers = self.node.model.buffers
        if not buffers.numel():
            return {}
        if self.node.cfg.buffers == "local":
            self.state.set(BUFFERS.name, buffers)
            return {}
        return {BUFFERS.name: buffers.clone()}

    def _check_match(self, config, down: dict[str, torch.Tensor]) -> None:
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

    def evaluate(self, parameters, config):
        """The received global model (and averaged buffers, if sent) on this client's held-out test data, and on
        its validation share when it has one: eval mode, batches of eval-batch-size, no client state touched.
        Returns (test loss, test examples, {accuracy, val-loss, val-accuracy, n-val, partition-id}); an empty test
        split returns 0 examples and `empty`=1 (the server skips and counts it); a failure, an error reply."""
        try:
            return self._evaluate(parameters, config)
        except Exception as err:
            message = f"{type(err).__name__}: {err}".splitlines()[0][:500]
            details = traceback.format_exc()[-MAX_TRACEBACK_CHARS:]
            return 0.0, 0, {"partition-id": self.node.partition_id, "error": message, "traceback": details}

    def _evaluate(self, parameters, config):
        node = self.node
        arrays = unpack(parameters, str(config.get(ARRAYS_KEY, "model")))
        down = {k: torch.tensor(v, device=node.device) for k, v in arrays.items()}
        self._load_buffers(down.pop(BUFFERS.name, None))  # read only: buffers='local' reads this client's own
        self._check_match(config, down)
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
