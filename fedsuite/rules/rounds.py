"""What one round carries between the Flower adapter and a server rule, as plain data (no Flower, no torch).

- `Reply`: a validated client reply to the round's fit message.
- `Query`: a rule's declared exchange before the fit messages (MimeSVRG's gradient query): the clients are sent
  the model with `phase` in their config and answer with one named d-vector.
- `Answer`: one valid answer to a query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

PHASE_KEY = "phase"  # fit-config key telling a client which exchange a message belongs to (absent: training)


@dataclass
class Reply:
    partition_id: int
    num_examples: int
    steps: int  # K_i actually taken
    lr: float  # η_l the client used this round
    arrays: dict[str, np.ndarray]  # float64 copies for aggregation
    metrics: dict[str, Any] = field(default_factory=dict)
    uplink_bytes: int = 0  # as received


@dataclass(frozen=True)
class Query:
    phase: str  # the config value of PHASE_KEY the clients see
    answer: str  # the name of the d-vector each client returns


@dataclass
class Answer:
    vector: np.ndarray  # float64
    num_examples: int
    seconds: float  # the client's compute time
    nbytes: int = 0  # as received
