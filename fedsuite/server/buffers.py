"""Model buffers averaged by the server (buffers='average'), outside every algorithm's rule.

The buffers (BatchNorm running statistics …) go down beside the model as the array `buffers`, come back as an extra
array that is taken out of a reply before it is validated (present, of the model's buffers' size, finite, else the
reply is rejected), and are averaged over the accepted replies with the rule's weighting (uniform, or by samples).
No correction, momentum, control variate or clip of any algorithm touches them, and the communication figures count
only the federated vectors. With buffers='local' (each client keeps its own) or a buffer-free model there are none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.common import FitRes, Parameters

from fedsuite.codec.payload import ARRAYS_KEY, PayloadError, split_off, weighted_mean
from fedsuite.rules.declared import BUFFERS
from fedsuite.rules.rounds import Reply
from fedsuite.server.replies import RejectedReply
from fedsuite.server.wire import array_view


class AveragedBuffers:
    def __init__(self, initial: np.ndarray, weighting: str):
        self.vector = np.asarray(initial, np.float32).copy()  # the server's buffers, sent every round
        self.weighting = weighting
        self.returned: dict[int, np.ndarray] = {}  # this round: partition → the buffers it returned

    def downlink(self) -> dict[str, np.ndarray]:
        return {BUFFERS.name: self.vector}

    def start_round(self) -> None:
        self.returned = {}

    def take(self, res: FitRes) -> tuple[FitRes, np.ndarray | None]:
        """The reply without its `buffers` array, and that array (None for an error reply)."""
        metrics = dict(res.metrics or {})
        if "error" in metrics:
            return res, None
        try:  # the arrays' bytes stay as they came: the reply is not encoded again without its buffers
            tensors, names, buffers = split_off(res.parameters.tensors, str(metrics.get(ARRAYS_KEY, "")), BUFFERS.name)
        except PayloadError as err:
            raise RejectedReply(str(err)) from err
        buffers = None if buffers is None else array_view(buffers)
        if buffers is None or buffers.shape != self.vector.shape:
            got = "none" if buffers is None else f"shape {buffers.shape}"
            raise RejectedReply(f"array 'buffers': expected the model's {self.vector.shape} buffers, got {got}")
        if not np.all(np.isfinite(buffers)):
            raise RejectedReply("array 'buffers' has non-finite values", diverged=True)
        metrics[ARRAYS_KEY] = names
        stripped = FitRes(res.status, Parameters(list(tensors), res.parameters.tensor_type), res.num_examples, metrics)
        return stripped, np.array(buffers, np.float32)  # a writable copy

    def keep(self, partition_id: int, buffers: np.ndarray | None) -> None:
        if buffers is not None:
            self.returned[partition_id] = buffers

    def average(self, replies: Sequence[Reply]) -> None:
        """The accepted replies' buffers, weighted as the rule weighs the cohort, in partition order."""
        weights = [r.num_examples if self.weighting == "samples" else 1.0 for r in replies]
        self.vector = weighted_mean([self.returned[r.partition_id] for r in replies], weights)

    def load(self, value) -> None:
        if not isinstance(value, np.ndarray) or value.shape != self.vector.shape:
            raise ValueError(f"buffers: expected a {self.vector.shape} array, got {getattr(value, 'shape', '?')}")
        self.vector = np.asarray(value, np.float32)
