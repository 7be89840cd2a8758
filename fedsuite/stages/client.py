"""`ClientStage`: one cross-cutting mechanism on the client's side of a round, the counterpart of the server's
`ServerStage` (fedsuite/stages/server.py; docs/developer/architecture.md, Round stages). Flower-free, like the rules:
the one client adapter, `RuleClient` (fedsuite/node/client.py), calls every stage of its client at the same points
of each training round, in the order `client_stages` (fedsuite/stages/client_run.py) gave them, and knows none of
them by name. Every hook does nothing by default, so a stage writes only the hooks it needs.

A training round, as the stages see it (`RuleClient.prepare`, then the local loop, then `RuleClient.finish`; the
batched engine, fedsuite/batched/, calls the same `prepare` and `finish` around its stacked loop):
0. `receive(down, node)`: once the message's arrays are decoded and the configuration checked (fit and evaluate):
   a stage takes out of `down` the arrays sent for it and loads them (the model's averaged buffers). Then, in a fit,
   `start(down, node)`: before the round's context is built, a stage may move the round's start `down["model"]`
   (relaxed initialisation); what it returns is kept as `PreparedFit.started[stage]` for its later hooks.
1. `prepare(node, ctx)`: once the round's context and update rule exist, before the loop. Returns the loop's
   gradient oracle for this round (fedsuite.local.loop.train_local's `private`, kept as `PreparedFit.private`), or None;
   at most one stage of a client returns one (DP-SGD: its private per-record gradients).
2. `before_release(fit)`: after the loop, before the rule computes the upload (which may move the client's state)
   and before anything leaves; raising refuses the round (an error reply, nothing released, no state saved; DP-SGD
   past its target ε).
   Then `uplink(result, fit, node)`: arrays a stage adds beside the rule's upload (the model's trained buffers, the
   start shift), checked finite with them.
3. `release(uplink, fit, node)`: the complete, finite upload (the rule's arrays, the model's buffers, the start
   shift) → what leaves the client, and the metrics that go with it (client-level DP: clipped jointly, its noise
   share, adaptive clipping's bit). Each stage gets the previous stage's arrays; then `before_save(result, fit)`: what
   a stage keeps in the client's state (relaxed initialisation: this round's last iterate), which is saved after it.
4. `metrics(metrics, fit)`: the reply's metrics (the adapter's, training losses included) → what it sends (client-
   level DP and DP-SGD drop the losses; DP-SGD adds its ε). The release's metrics are added after the last stage.
5. `num_examples(n)`: the reply's example count, the client's data size by default (client-level DP: 1, so the
   weights reveal nothing).
A server query (fedsuite.rules.rounds.Query) calls no stage, and an evaluation only `receive`. `config_keys` names
the fit-config entries a stage reads, which the adapter keeps out of the rule's `RoundContext.scalars`;
`trains_alone` says why the batched engine trains the clients of a run with this stage one at a time (None: it may
stack them); `handles_upload` whether it adds to or changes the upload, which then travels as host arrays.

To add one: a `ClientStage` subclass in the folder of its job (as fedsuite/privacy/release.py's
`ClientLevelRelease`), built in `client_stages` only when the run config (or, for the model's own stages, the
client's model) switches it on, so a run without any calls no stage at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STEPS_KEY = "local-steps"  # fit-config entry: this client's K_i for the round (absent: the run's own local-steps)
TRAINING_LOSSES = ("loss", "first-loss")  # the reply's training losses: its records' own, without noise


class ClientStage:
    config_keys: frozenset[str] = frozenset()  # fit-config entries it reads (not the rule's RoundContext.scalars)
    trains_alone: str | None = None  # why the batched engine trains this run's clients one at a time; None = it may
    handles_upload: bool | None = None  # whether it adds to or changes the upload; None = whether its class writes
    # `uplink` or `release` (the function `handles_upload` below)

    def receive(self, down: dict, node) -> None:
        return None

    def start(self, down: dict, node) -> Any:
        return None

    def prepare(self, node, ctx) -> Any:
        return None

    def before_release(self, fit) -> None:
        return None

    def uplink(self, result, fit, node) -> dict:
        return {}

    def release(self, uplink: dict, fit, node) -> tuple[dict, dict[str, Any]]:
        return uplink, {}

    def before_save(self, result, fit) -> None:
        return None

    def metrics(self, metrics: dict[str, Any], fit) -> dict[str, Any]:
        return metrics

    def num_examples(self, n: int) -> int:
        return n


def handles_upload(stage: ClientStage) -> bool:
    """Whether `stage` adds arrays to the upload or changes it (its own `handles_upload`, else whether its class
    writes `uplink` or `release`): such an upload is packed as host arrays; one no stage handles may stay on the
    device (fedsuite/codec/device_arrays.py; DP-SGD's stage, which only refuses, counts and reports, leaves it
    there)."""
    if stage.handles_upload is not None:
        return stage.handles_upload
    cls = type(stage)
    return cls.uplink is not ClientStage.uplink or cls.release is not ClientStage.release


def without_losses(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` without the training losses (TRAINING_LOSSES), in their order."""
    return {k: v for k, v in metrics.items() if k not in TRAINING_LOSSES}
