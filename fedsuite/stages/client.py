"""`ClientStage`: one cross-cutting mechanism on the client's side of a round, the counterpart of the server's
`ServerStage` (fedsuite/stages/server.py; docs/developer/architecture.md, Round stages). Flower-free, like the rules:
the one client adapter, `RuleClient` (fedsuite/node/client.py), calls every stage of its client at the same points
of each training round, in the order `client_stages` (fedsuite/stages/client_run.py) gave them, and knows none of
them by name. Every hook does nothing by default, so a stage writes only the hooks it needs.

A training round, as the stages see it (`RuleClient.prepare`, then the local loop, then `RuleClient.finish`; the
batched engine, fedsuite/batched/, calls the same `prepare` and `finish` around its stacked loop):
1. `prepare(node, ctx)`: once the round's context and update rule exist, before the loop. Returns the loop's
   gradient oracle for this round (fedsuite.local.loop.train_local's `private`, kept as `PreparedFit.private`), or None;
   at most one stage of a client returns one (DP-SGD: its private per-record gradients).
2. `before_release(fit)`: after the loop, before the rule computes the upload (which may move the client's state)
   and before anything leaves; raising refuses the round (an error reply, nothing released, no state saved; DP-SGD
   past its target ε).
3. `release(uplink, fit, node)`: the complete, finite upload (the rule's arrays, the model's buffers, the start
   shift) → what leaves the client, and the metrics that go with it (client-level DP: clipped jointly, its noise
   share, adaptive clipping's bit). Each stage gets the previous stage's arrays; the state is saved after the last.
4. `metrics(metrics, fit)`: the reply's metrics (the adapter's, training losses included) → what it sends (client-
   level DP and DP-SGD drop the losses; DP-SGD adds its ε). The release's metrics are added after the last stage.
5. `num_examples(n)`: the reply's example count, the client's data size by default (client-level DP: 1, so the
   weights reveal nothing).
A server query (fedsuite.rules.rounds.Query) and an evaluation call no stage. `config_keys` names the fit-config
entries a
stage reads, which the adapter keeps out of the rule's `RoundContext.scalars`; `trains_alone` says why the batched
engine trains the clients of a run with this stage one at a time (None: it may stack them).

To add one: a `ClientStage` subclass in the folder of its job (as fedsuite/privacy/release.py's
`ClientLevelRelease`), built in `client_stages` only when the run config switches it on, so a run without any calls
no stage at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRAINING_LOSSES = ("loss", "first-loss")  # the reply's training losses: its records' own, without noise


class ClientStage:
    config_keys: frozenset[str] = frozenset()  # fit-config entries it reads (not the rule's RoundContext.scalars)
    trains_alone: str | None = None  # why the batched engine trains this run's clients one at a time; None = it may

    def prepare(self, node, ctx) -> Any:
        return None

    def before_release(self, fit) -> None:
        return None

    def release(self, uplink: dict, fit, node) -> tuple[dict, dict[str, Any]]:
        return uplink, {}

    def metrics(self, metrics: dict[str, Any], fit) -> dict[str, Any]:
        return metrics

    def num_examples(self, n: int) -> int:
        return n


def without_losses(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` without the training losses (TRAINING_LOSSES), in their order."""
    return {k: v for k, v in metrics.items() if k not in TRAINING_LOSSES}
