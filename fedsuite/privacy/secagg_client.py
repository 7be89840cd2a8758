"""The client's half of secure aggregation (docs/privacy-secagg.md): Flower's `secaggplus_mod` behind a gate that
hands every other message on untouched, and the checks a client makes before its upload goes into a secure sum.

Under SecAgg+ the server sees only the cohort's mean, so it can no longer reject one client's upload: a client
whose upload would be rejected (an error reply, a non-finite or misshapen array, a non-finite loss) raises instead,
and SecAgg+ drops it from the round like a client that went away (its masks are reconstructed from its
neighbours' shares). The reason reaches the server as the message's error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
from flwr.app import Context, Message
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

from fedsuite.codec.payload import ARRAYS_KEY, PayloadError, unpack
from fedsuite.config.settings import value_of
from fedsuite.privacy.secagg import rounding_seed
from fedsuite.rules.declared import BUFFERS
from fedsuite.stages.client import TRAINING_LOSSES
from fedsuite.stages.compression import SUFFIX

log = logging.getLogger("flwr.fedsuite")


class SecureUploadRefused(RuntimeError):
    """This client's upload is not fit for a secure sum; SecAgg+ drops the client from the round."""


def is_secure(run_config: Mapping) -> bool:
    """Whether the run aggregates with SecAgg+ (run-config key secagg)."""
    return bool(value_of(run_config, "secagg"))  # the raw run config: only this key is read


def secagg_mod(msg: Message, context: Context, call_next) -> Message:
    """Flower's secaggplus_mod for the messages of a SecAgg+ round (a train message with SecAgg+'s config record);
    every other message goes to the app as if there were no mod. NumPy's global generator, which the mod's
    stochastic rounding draws from, is left as it was found."""
    if msg.metadata.message_type != MessageType.TRAIN or RECORD_KEY_CONFIGS not in msg.content.config_records:
        return call_next(msg, context)
    saved = np.random.get_state()
    try:
        return secaggplus_mod(msg, context, call_next)
    finally:
        np.random.set_state(saved)


def _size(node, name: str) -> int:
    """The length of uploaded array `name`: the model's buffers, random-k's k values of a compressed vector
    (compress-up-mask='common', fedsuite.stages.compression.SUFFIX), else d."""
    if name == BUFFERS.name:
        return int(node.model.buffers.numel())
    return int(node.cfg.compression.k) if name.endswith(SUFFIX) else int(node.model.dim)


def secure_reply(node, config: Mapping, arrays: list, num_examples: int, metrics: Mapping) -> tuple:
    """The fit reply as it goes into the secure sum: checked as the server would check it (raises
    SecureUploadRefused), with one example (SecAgg+ then gives every client the weight 1), and NumPy's global
    generator seeded for the mod's rounding draws (fedsuite.privacy.secagg.rounding_seed)."""
    if "error" in metrics:
        details = metrics.get("traceback", "")
        log.warning("fedsuite │ partition %s: %s\n%s", node.partition_id, metrics["error"], details)
        raise SecureUploadRefused(str(metrics["error"]))
    try:
        named = unpack(arrays, str(metrics.get(ARRAYS_KEY, "")))
    except PayloadError as err:
        raise SecureUploadRefused(str(err)) from None
    settings = node.cfg.secagg
    for name, array in named.items():
        if array.shape != (size := _size(node, name),):
            raise SecureUploadRefused(f"array {name!r} has shape {array.shape}, expected ({size},)")
        if not np.all(np.isfinite(array)):
            raise SecureUploadRefused(f"array {name!r} has non-finite values")
        if (outside := int(np.sum(np.abs(array) > settings.clip_range))) > 0:
            log.warning("fedsuite │ partition %s: %d values of %r lie outside secagg-clip-range=%g and are clipped",
                        node.partition_id, outside, name, settings.clip_range)  # fmt: skip
    for key in TRAINING_LOSSES:
        if key in metrics and not np.isfinite(float(metrics[key])):
            raise SecureUploadRefused(f"{key} is {metrics[key]}: the training diverged")
    np.random.seed(rounding_seed(node.cfg.seed, int(config["round"]), node.partition_id, node.noise_secret))
    return arrays, 1, metrics
