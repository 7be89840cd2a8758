"""Secure aggregation in process (secagg=true, docs/privacy-secagg.md): SecAgg+'s arithmetic without its protocol.

Each client's upload is weighted, clipped and quantised with the rounding draws its SuperNode's secaggplus_mod would
use, the integers are summed modulo 2**32 and the cohort's mean taken back out (fedsuite.privacy.secagg), so the
strategy gets what Flower's SecAggPlusWorkflow would hand it, every FitRes holding the cohort's mean, and the final
model is the one a `flwr run` with SecAgg+ ends with, byte for byte. The composition root (fedsuite/run/compose.py)
gives it to the in-process engine's round loop.
"""

from __future__ import annotations

import numpy as np
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

from fedsuite.node.app import noise_secret
from fedsuite.privacy.secagg import SecAggSettings, quantize_upload, rounding_seed, secure_mean
from fedsuite.server.loop import FitRound, RoundLoop
from fedsuite.server.secure import SecureAggregationHalted


class SecureSumRound(FitRound):
    """The in-process fit round with SecAgg+'s arithmetic in place of its protocol (module docstring). A round with
    fewer replies than the reconstruction threshold (or than two) is given up as the workflow gives it up."""

    def __init__(self, settings: SecAggSettings, seed: int):
        self.settings, self.seed = settings, seed

    def run(self, loop: RoundLoop, server_round: int, timeout: float | None):
        strategy = loop.strategy
        instructions = strategy.configure_fit(server_round, loop.parameters, loop.client_manager())
        if not instructions:
            return None
        results, failures, quantized = self.uploads(instructions, server_round, timeout)
        needed = max(2, self.settings.reconstruction_threshold(len(instructions)))
        if len(results) < needed:
            halted = SecureAggregationHalted(f"{len(results)} of {len(instructions)} clients left, {needed} needed")
            strategy.aggregate_fit(server_round, [], [*failures, halted])
            return None
        mean = ndarrays_to_parameters(secure_mean(quantized, self.settings))
        for _, res in results:
            res.parameters = mean
        parameters, metrics = strategy.aggregate_fit(server_round, results, failures)
        return parameters, metrics, (results, failures)

    def uploads(self, instructions: list, server_round: int, timeout: float | None):
        """(results, failures, each result's quantised upload), the clients trained one after the other; none with
        fewer than two instructions (no sum could hide an upload)."""
        results, failures, quantized = [], [], []
        saved = np.random.get_state()  # a client seeds NumPy's generator for its rounding draws
        try:
            for proxy, ins in instructions if len(instructions) >= 2 else ():
                try:
                    res = proxy.fit(ins, timeout, str(server_round))
                except Exception as err:  # a refused upload (fedsuite.privacy.secagg_client): dropped from the sum
                    failures.append(err)
                    continue
                secret = noise_secret(proxy.context.node_config)
                seed = rounding_seed(self.seed, server_round, int(res.metrics["partition-id"]), secret)
                quantized.append(
                    quantize_upload(parameters_to_ndarrays(res.parameters), res.num_examples, self.settings, seed)
                )
                results.append((proxy, res))
        finally:
            np.random.set_state(saved)
        return results, failures, quantized
