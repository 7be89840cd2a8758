"""The run-config refusals of DP-SGD (sample-level privacy, docs/privacy-dp-sgd.md), one line each, before any
training. No torch here: fedsuite/config.py runs them while it resolves a run config.

What the accounting assumes, and so what is refused:
- every local step trains on a batch of B distinct records drawn uniformly without replacement from the client's n
  (fixed-size batches: local-steps > 0). Epoch mode passes over a shuffled order instead, each record once an
  epoch with a smaller last batch, which the accountant's sampled event does not describe;
- no gradient of the records leaves the client except through the private local steps: SCAFFOLD's option I
  (scaffold-option=1) uploads a full local gradient, MimeSVRG answers its query with one;
- records are not tied to fixed data blocks (local-batches='blocks', and LoSAC, LoSAC-Prox and FedSaga, whose
  steps always train on one of M fixed blocks and keep their gradients in a table).
The batch size may be the whole local dataset (batch-size=0): that is DP gradient descent, the event without
subsampling.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

# Built-in algorithms whose clients release record gradients outside the private local steps, with why.
REFUSED_ALGORITHMS = {
    "mimesvrg": "its server query uploads the full local gradient without noise",
    "losac": "its steps train on fixed data blocks and keep their gradients in a table",
    "losac-prox": "its steps train on fixed data blocks and keep their gradients in a table",
    "fedsaga": "its steps train on fixed data blocks and keep their gradients in a table",
}
INSTALL = "pip install 'fedsuite[privacy]' (the dp-accounting library)"


def config_errors(v: Mapping[str, Any]) -> list[str]:
    """One line per setting DP-SGD cannot account for (module docstring); none when dp-sgd is off."""
    if v.get("dp-sgd") is not True:
        return []
    errors = []
    if v.get("local-steps") == 0:
        errors.append("dp-sgd=true needs fixed-size sampled batches: set local-steps > 0 (epoch mode, local-steps=0, "
                      "passes over a shuffled order the privacy accountant does not describe)")  # fmt: skip
    if v.get("local-batches") == "blocks":
        errors.append("dp-sgd=true: local-batches='blocks' trains on fixed data blocks, not sampled batches; use "
                      "local-batches='minibatch'")  # fmt: skip
    algorithm = v.get("algorithm")
    if algorithm in REFUSED_ALGORITHMS:
        errors.append(f"dp-sgd=true: algorithm={algorithm!r} is refused: {REFUSED_ALGORITHMS[algorithm]}")
    if algorithm == "scaffold" and v.get("scaffold-option") == 1:
        errors.append("dp-sgd=true: scaffold-option=1 uploads a full local gradient without noise; use "
                      "scaffold-option=2")  # fmt: skip
    if find_spec("dp_accounting") is None:
        errors.append(f"dp-sgd=true needs the privacy accountant: {INSTALL}")
    return errors
