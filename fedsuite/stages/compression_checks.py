"""Compressed uploads' and broadcasts' refusals of run configs (docs/running/compression.md), one line each naming the
key, and an algorithm's refusal of compression (its entry's `refuses["compress-up"]`); run with every mechanism's check
(fedsuite/stages/refusals.py). k > d needs the model: refused with the client-state plan
(fedsuite.stages.compression.dimension_problem); SecAgg+'s refusal is secure aggregation's own check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedsuite.config.groups import uplink_compressor
from fedsuite.config.settings import value_of


def compression_errors(v: Mapping[str, Any], refusal: str = "") -> list[str]:
    """The problems of the compression keys of `v` (validated run-config values), and `refusal`: why the chosen
    algorithm cannot take compressed uploads ('' = it can)."""
    if any(key not in v for key in ("compress-up", "compress-up-k", "compress-feedback", "compress-down")):
        return []
    errors = downlink_errors(v)
    name, feedback = uplink_compressor(v), str(v["compress-feedback"])
    if feedback == "ef21" and name != "none":
        errors += ef21_errors(v)
    if name in ("topk", "randk") and int(v["compress-up-k"]) <= 0:
        errors.append(f"compress-up-k={v['compress-up-k']}: compress-up={name!r} keeps k coordinates of each "
                      "uploaded vector; give 1 ≤ compress-up-k ≤ d")  # fmt: skip
    if name != "none" and refusal:
        errors.append(f"compress-up={name!r}: algorithm={v['algorithm']!r} {refusal}")
    if name == "none" and feedback != "none":
        errors.append(f"compress-feedback={feedback!r}: there is no compressor to feed back (compress-up='none')")
    if value_of(v, "compress-up-mask") == "common" and name != "randk":
        errors.append(f"compress-up-mask='common': only random-k draws coordinates (compress-up={name!r}); use "
                      "compress-up='randk' or compress-up-mask='own'")  # fmt: skip
    within_clip = name in ("topk", "sign") and feedback == "none"  # ‖C(v)‖ ≤ ‖v‖: the server's noise still covers it
    if name != "none" and value_of(v, "dp") == "server" and not within_clip:
        errors.append(f"compress-up={name!r} with dp='server': the server's noise is sized to the clip, which a "
                      "decoded upload may exceed; use dp='clients' (noise added before compression)")  # fmt: skip
    return errors


def downlink_errors(v: Mapping[str, Any]) -> list[str]:
    """The problems of compress-down and compress-down-k (k > d is refused with the client-state plan)."""
    down = str(v["compress-down"])
    if down in ("topk", "randk") and int(value_of(v, "compress-down-k")) <= 0:
        return [f"compress-down-k={value_of(v, 'compress-down-k')}: compress-down={down!r} keeps k coordinates of each "
                "broadcast vector; give 1 ≤ compress-down-k ≤ d"]  # fmt: skip
    return []


def ef21_errors(v: Mapping[str, Any]) -> list[str]:
    """EF21's server hands the rule vectors whose uniform mean over the replies is its estimate g (docs/running/
    compression.md#ef21): a rule that weights them by samples, or sums them and divides by N, would not get g."""
    errors = []
    if value_of(v, "weighting") == "samples":
        errors.append("compress-feedback='ef21' with weighting='samples': EF21's server estimate is the uniform mean "
                      "of the clients' estimates; use weighting='uniform' or compress-feedback='ef'")  # fmt: skip
    if value_of(v, "agg-scale") == "1/N":
        errors.append("compress-feedback='ef21' with agg-scale='1/N': EF21's server estimate is the mean of the "
                      "replies, not their sum over N; use agg-scale='mean' or compress-feedback='ef'")  # fmt: skip
    return errors
