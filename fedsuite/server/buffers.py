"""Model buffers averaged by the server (buffers='average'), outside every algorithm's rule, as a round stage
(fedsuite/stages/server.py; docs/developer/architecture.md, Round stages).

The buffers (BatchNorm running statistics …) go down beside the model as the array `buffers` (`downlink`), come back
as an extra array that is taken out of a reply before it is validated (`take`: present, of the model's buffers' size,
finite, else the reply is rejected), are kept once the reply is valid (`keep`) and are averaged over the accepted
replies with the rule's weighting (uniform, or by samples) once the round's model is in (`applied`). No correction,
momentum, control variate or clip of any algorithm touches them, and the communication figures count only the
federated vectors. They are checkpointed under `buffers` and evaluated with the model. With buffers='local' (each
client keeps its own) or a buffer-free model there is no such stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedsuite.codec.payload import PayloadError, split_off, weighted_mean
from fedsuite.rules.declared import BUFFERS
from fedsuite.rules.rounds import Reply
from fedsuite.server.replies import RejectedReply
from fedsuite.server.wire import array_view
from fedsuite.stages.server import ServerStage


class AveragedBuffers(ServerStage):
    state_name = BUFFERS.name

    def __init__(self, initial: np.ndarray, weighting: str):
        self.vector = np.asarray(initial, np.float32).copy()  # the server's buffers, sent every round
        self.weighting = weighting
        self.returned: dict[int, np.ndarray] = {}  # this round: partition → the buffers it returned
        self._round: int | None = None  # the round `returned` belongs to

    @classmethod
    def of_model(cls, initial: np.ndarray | None, weighting: str) -> AveragedBuffers | None:
        """The stage when the server averages the model's buffers (`initial`: their initial values), else None."""
        return None if initial is None else cls(initial, weighting)

    def _start(self, server_round: int) -> None:
        if server_round != self._round:
            self.returned, self._round = {}, server_round

    def downlink(self, server_round: int) -> dict[str, np.ndarray]:
        self._start(server_round)
        return {BUFFERS.name: self.vector}

    def take(
        self, server_round: int, tensors: list[bytes], names: str, metrics: Mapping[str, Any]
    ) -> tuple[list[bytes], str, Any]:
        """The reply's arrays without `buffers` (their bytes as they came: the reply is not encoded again), and that
        array as a writable float32 copy."""
        self._start(server_round)
        try:
            tensors, names, buffers = split_off(tensors, names, BUFFERS.name)
        except PayloadError as err:
            raise RejectedReply(str(err)) from err
        buffers = None if buffers is None else array_view(buffers)
        if buffers is None or buffers.shape != self.vector.shape:
            got = "none" if buffers is None else f"shape {buffers.shape}"
            raise RejectedReply(f"array 'buffers': expected the model's {self.vector.shape} buffers, got {got}")
        if not np.all(np.isfinite(buffers)):
            raise RejectedReply("array 'buffers' has non-finite values", diverged=True)
        return list(tensors), names, np.array(buffers, np.float32)

    def keep(self, server_round: int, partition_id: int, taken: Any) -> None:
        self._start(server_round)
        if taken is not None:
            self.returned[partition_id] = taken

    def applied(self, server_round: int, replies: Sequence[Reply]) -> None:
        """The accepted replies' buffers, weighted as the rule weighs the cohort, in partition order."""
        weights = [r.num_examples if self.weighting == "samples" else 1.0 for r in replies]
        self.vector = weighted_mean([self.returned[r.partition_id] for r in replies], weights)

    def evaluation_args(self) -> tuple:
        return (self.vector,)

    def state_dict(self) -> np.ndarray:
        return self.vector

    def load_state_dict(self, values: Any) -> None:
        if not isinstance(values, np.ndarray) or values.shape != self.vector.shape:
            raise ValueError(f"buffers: expected a {self.vector.shape} array, got {getattr(values, 'shape', '?')}")
        self.vector = np.asarray(values, np.float32)
