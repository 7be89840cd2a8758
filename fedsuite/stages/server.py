"""`ServerStage`: one cross-cutting mechanism on the server's side of a round (docs/developer/architecture.md, Round
stages). Flower-free, like the rules: the strategy (fedsuite/server/adapter.py) calls every stage of the run at the
same points of each round, in the order the composition root (fedsuite/server/compose.py) gave them, and knows none
of them by name. Every hook does nothing by default, so a stage writes only the hooks it needs.

A round, as the stages see it:
1. `stop_before(round, cohort)`: a reason ends the run before the round (status budget-spent, no row).
2. `absent(round, cohort)`: clients of the cohort that get no instruction, each with its reason (clients.log).
3. `round_config(round, cohort)` / `client_config(round, pid)`: entries of every client's / one client's fit
   config; then `sent(round, absent)`: the row's figures decided at sending.
4. `refused(round, results, failures)`: a reason ends the run at this round without applying it (budget-spent).
5. `screen(round, replies, rejected)`: the round's valid replies and rejected count, as the stage lets them stand
   (secure aggregation rejects a whole round that holds a rejected reply); then `received(round, replies)`: the
   row's figures from the round's valid replies.
6. `empty_round(round, rule, lr)`: replies to aggregate when none came (a round that still releases noise).
7. `release(round, replies)`: change the replies in place before the rule aggregates them (noise on the sum);
   returns the row's figures.
8. `applied(round, replies)`: after the rule's new model is in (the server's averaged model buffers follow it).
9. `check_row(round, metrics)`: a (status, reason) verdict that ends the run once the round's metrics are in.
Arrays beside the model: `downlink(round)` adds arrays to every fit and evaluate message (after the rule's own; the
communication figures leave them out), `addressed(round, pid, accepted, shared)` gives one client its own arrays in
place of the shared model and downlink (compressed broadcasts), `take(round, tensors, names)` takes a stage's arrays out
of a reply before it is validated, and `keep(round, partition, taken)` hands them back once the reply is valid;
`evaluation_args()` are what the central evaluation gets beside the model.
A stage with a `state_name` keeps state in the strategy's checkpoints (`state_dict` / `load_state_dict`), and
`hides_replies` says that no figure may be computed from single replies (client-level DP); `row_labels()` are
columns every row of the run gets (whether the DP noise is secret). `handles_vectors` says whether the stage reads or
changes the round's arrays (the replies', the model's) as host arrays: True unless a stage says otherwise, and while
one of the run's stages does, the batched round keeps the server rule on the host
(docs/running/batched.md#the-server-rule-on-the-device).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedsuite.rules.rounds import Reply

STOPPED = "budget-spent"  # the run's status when a stage's stop_before or refused ends it (fedsuite.results.folder)


class ServerStage:
    state_name: str | None = None  # its key in the strategy's checkpointed state; None = it keeps none
    hides_replies: bool = False  # no row figure from single replies' arrays or losses (they carry no noise)
    handles_vectors: bool = True  # it reads or changes the round's arrays as host arrays (module docstring)

    def stop_before(self, server_round: int, cohort: Sequence[int]) -> str | None:
        return None

    def absent(self, server_round: int, cohort: Sequence[int]) -> dict[int, str]:
        return {}

    def round_config(self, server_round: int, cohort: Sequence[int]) -> dict[str, Any]:
        return {}

    def client_config(self, server_round: int, partition_id: int) -> dict[str, Any]:
        return {}

    def sent(self, server_round: int, absent: Mapping[int, str]) -> dict[str, Any]:
        return {}

    def refused(self, server_round: int, results: Sequence, failures: Sequence) -> str | None:
        return None

    def screen(self, server_round: int, replies: list[Reply], rejected: int) -> tuple[list[Reply], int]:
        return replies, rejected

    def received(self, server_round: int, replies: Sequence[Reply]) -> dict[str, Any]:
        return {}

    def empty_round(self, server_round: int, rule, lr: float) -> list[Reply]:
        return []

    def release(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        return {}

    def applied(self, server_round: int, replies: Sequence[Reply]) -> None:
        return None

    def check_row(self, server_round: int, metrics: Mapping[str, Any]) -> tuple[str, str] | None:
        return None

    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        return {}

    def addressed(self, server_round: int, partition_id: int, accepted_round: int,
                  shared: Mapping[str, np.ndarray]) -> tuple[Mapping[str, np.ndarray], dict[str, Any]]:  # fmt: skip
        """What one client gets in place of the arrays every client of the round shares (the model and the rule's
        downlink; `accepted_round`: the last round whose reply from it was accepted, 0: none), and entries of its fit
        config. Returning `shared` itself keeps the shared message."""
        return shared, {}

    def take(
        self, server_round: int, tensors: list[bytes], names: str, metrics: Mapping[str, Any]
    ) -> tuple[list[bytes], str, Any]:
        """The reply's arrays (`tensors`, named by `names`, fedsuite.codec.payload) without this stage's (or with them
        replaced: a decoded upload), and what it took (None: nothing); `metrics`: the reply's, as sent. Raising
        RejectedReply (fedsuite.server.replies) rejects the reply."""
        return tensors, names, None

    def keep(self, server_round: int, partition_id: int, taken: Any) -> None:
        return None

    def evaluation_args(self) -> tuple:
        return ()

    def row_labels(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> Any:
        return None

    def load_state_dict(self, values: Any) -> None:
        return None
