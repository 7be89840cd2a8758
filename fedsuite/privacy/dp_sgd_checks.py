"""The run-config refusals of DP-SGD (sample-level privacy, docs/privacy-dp-sgd.md), one line each, before any
training. No torch here: the registry (fedsuite/registry/known.py) runs them while a run config is resolved, with the
chosen algorithm's declared refusal (its entry's `refuses['dp-sgd']`).

What the accounting assumes, and so what is refused:
- every local step trains on a batch of B distinct records drawn uniformly without replacement from the client's n
  (fixed-size batches: local-steps > 0). Epoch mode passes over a shuffled order instead, each record once an
  epoch with a smaller last batch, which the accountant's sampled event does not describe;
- no gradient of the records leaves the client except through the private local steps (an algorithm that
  uploads a full local gradient declares it: MimeSVRG's entry, SCAFFOLD's check of scaffold-option=1);
- records are not tied to fixed data blocks (local-batches='blocks' here; LoSAC, LoSAC-Prox and FedSaga, whose
  steps always train on one of M fixed blocks, declare it in their entries);
- ghost clipping (dp-sgd-per-record='ghost') runs without autocast, so that no record's share passes the clip by
  bfloat16 rounding (fedsuite/privacy/per_record.py).
The batch size may be the whole local dataset (batch-size=0): that is DP gradient descent, the event without
subsampling.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

INSTALL = "pip install 'fedsuite[privacy]' (the dp-accounting library)"


def config_errors(v: Mapping[str, Any], refusal: str = "") -> list[str]:
    """One line per setting DP-SGD cannot account for (module docstring); none when dp-sgd is off. `refusal`: why
    the chosen algorithm cannot run under DP-SGD (its registry entry's refuses['dp-sgd']; '' = it can); a refusal
    that depends on the config is one of the algorithm's own checks (SCAFFOLD's scaffold-option=1)."""
    if v.get("dp-sgd") is not True:
        return []
    errors = []
    if v.get("local-steps") == 0:
        errors.append("dp-sgd=true needs fixed-size sampled batches: set local-steps > 0 (epoch mode, local-steps=0, "
                      "passes over a shuffled order the privacy accountant does not describe)")  # fmt: skip
    if v.get("local-batches") == "blocks":
        errors.append("dp-sgd=true: local-batches='blocks' trains on fixed data blocks, not sampled batches; use "
                      "local-batches='minibatch'")  # fmt: skip
    if v.get("dp-sgd-per-record") == "ghost" and v.get("autocast") not in (None, "none"):
        errors.append(f"dp-sgd-per-record='ghost' takes no autocast (autocast={v.get('autocast')!r}): its bfloat16 "
                      "backward pass could let a record's share of the sum pass the clip by rounding; use "
                      "autocast='none' or dp-sgd-per-record='vmap'")  # fmt: skip
    if refusal:
        errors.append(f"dp-sgd=true: algorithm={v.get('algorithm')!r} is refused: {refusal}")
    if find_spec("dp_accounting") is None:
        errors.append(f"dp-sgd=true needs the privacy accountant: {INSTALL}")
    return errors
