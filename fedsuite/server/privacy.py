"""The server's half of client-level differential privacy (docs/privacy.md): the round's clip and cohort size in
the fit config, the Gaussian noise on the sums when the server adds it (dp='server'), adaptive clipping's update of
C, the privacy accountant, and the target ε that stops a run before a round would exceed it.

The noise is put on the sum of each uploaded array: every reply holding the array gets an equal share of one draw,
so a rule that averages or sums its replies (every algorithm that dp allows: fedsuite/registry/builtin.py) sees
exactly the cohort's noisy sum. With dp='clients' the clients have added their shares already.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedsuite.privacy.accountant import POISSON, RunAccountant
from fedsuite.privacy.noise import numpy_stream
from fedsuite.privacy.release import BELOW_CLIP, CLIP_KEY, COHORT_KEY, update_noise
from fedsuite.results.folder import noise_source_label
from fedsuite.rules.rounds import Reply
from fedsuite.stages.server import ServerStage

BUDGET_SPENT = "budget-spent"  # the run's status when dp-target-epsilon stopped it (docs/privacy.md)


class ServerPrivacy(ServerStage):
    """Client-level DP as a round stage (fedsuite/stages/server.py): the target ε before a round, the clip and cohort
    size in every fit config, a noise-only round under Poisson sampling, the noise and accounting on the replies."""

    state_name = "privacy"  # the strategy's checkpointed state holds the clip and the accountant's rounds
    hides_replies = True  # private clients send no loss, and single uploads carry only a share of the noise

    def __init__(self, privacy, num_clients: int, clients_per_round: int, seed: int, count_noise: float,
                 poisson_rate: float | None = None, local_steps: int = 1):  # fmt: skip
        """`privacy`: the run's fedsuite.config.run_config.ClientPrivacy; `count_noise`: σ_b of adaptive clipping;
        `poisson_rate`: p of Poisson sampling (sampling='bernoulli'), None for fixed-size cohorts."""
        self.privacy, self.seed, self.count_noise = privacy, seed, count_noise
        self.num_clients, self.clients_per_round = num_clients, clients_per_round
        self.poisson_rate, self.local_steps = poisson_rate, local_steps
        self.adaptive = privacy.clip_mode == "adaptive"
        self.clip = privacy.clip  # C_t
        self.accountant = RunAccountant(privacy.delta)
        self._cohort: dict[int, int] = {}

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"clip": self.clip, "rounds": self.accountant.state()}

    def load_state_dict(self, values: dict[str, Any]) -> None:
        self.clip = float(values["clip"])
        self.accountant = RunAccountant.from_state(self.privacy.delta, values["rounds"])

    # ---- one round -------------------------------------------------------------------------------
    def stop_before(self, server_round: int, cohort: Sequence[int]) -> str | None:
        return self.budget_left(server_round)

    def round_config(self, server_round: int, cohort: Sequence[int]) -> dict[str, Any]:
        return self.fit_config(server_round, len(cohort))

    def empty_round(self, server_round: int, rule, lr: float) -> list[Reply]:
        return [self.noise_carrier(server_round, rule, lr)] if self.noise_only(server_round) else []

    def row_labels(self) -> dict[str, Any]:
        return {"dp_noise": noise_source_label(self.privacy.noise_source)}  # secret, or seeded: not private

    def budget_left(self, server_round: int) -> str | None:
        """None while one more full round keeps ε within dp-target-epsilon; else why the run stops here."""
        target = self.privacy.target_epsilon
        if target <= 0:
            return None
        spent = self.accountant.epsilon()
        after = self.accountant.epsilon({self._event(self.privacy.noise, self.clients_per_round): 1})
        if after <= target:
            return None
        return (f"dp-target-epsilon={target:g} reached: ε={spent:.4g} after round {server_round - 1}, round "
                f"{server_round} would take it to {after:.4g} (dp-delta={self.privacy.delta:g})")  # fmt: skip

    def fit_config(self, server_round: int, cohort: int) -> dict[str, Any]:
        """What every sampled client needs: the round's clip and the cohort size its noise share is sized to."""
        self._cohort[server_round] = cohort
        return {CLIP_KEY: float(self.clip), COHORT_KEY: int(cohort)}

    def noise_only(self, server_round: int) -> bool:
        """Whether a round without a valid reply still releases noise: under Poisson sampling, where whether anyone
        took part must not show (an empty cohort, or every reply lost)."""
        return self.poisson_rate is not None

    def noise_carrier(self, server_round: int, rule, lr: float) -> Reply:
        """A reply of zeros for every array the rule expects, from no client (partition −1): the round's noise is
        added to it, so the rule moves the model by the noise alone."""
        names = (*rule.uplink, *rule.uplink_some)
        arrays = {name: np.zeros(rule.dim, np.float64) for name in names}
        return Reply(partition_id=-1, num_examples=1, steps=self.local_steps, lr=lr, arrays=arrays)

    def _event(self, sigma: float, cohort: int) -> tuple[float, float, int]:
        if self.poisson_rate is not None:
            return sigma, self.poisson_rate, POISSON
        return sigma, cohort, self.num_clients

    def release(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Add the server's noise (dp='server') to the validated replies in place, move C (adaptive), account the
        round; returns the round row's privacy figures."""
        cohort = self._cohort.pop(server_round, len(replies))
        clip, sigma = self.clip, self.privacy.noise
        rng = numpy_stream(self.privacy.noise_source, [self.seed, server_round, 0xD9])  # secret unless 'seeded'
        if self.privacy.mode == "server" and sigma > 0 and replies:
            std = update_noise(sigma, self.adaptive, self.count_noise) * clip
            for name in sorted({name for r in replies for name in r.arrays}):
                holders = [r for r in replies if name in r.arrays]
                share = rng.normal(0.0, std, size=holders[0].arrays[name].shape) / len(holders)
                for r in holders:
                    r.arrays[name] = r.arrays[name] + share
        if self.adaptive and replies:
            unclipped = sum(float(r.metrics.get(BELOW_CLIP, 0.0)) for r in replies)
            if self.privacy.mode == "server":
                unclipped += float(rng.normal(0.0, self.count_noise))
            counted = len(replies) if self.poisson_rate is None else self.poisson_rate * self.num_clients
            self.clip = clip * math.exp(-self.privacy.clip_lr * (unclipped / counted - self.privacy.quantile))
        if replies:  # the noise the sum carried: with dp='clients' only the replies' shares arrived
            carried = sigma if self.privacy.mode == "server" else sigma * math.sqrt(len(replies) / max(cohort, 1))
            self.accountant.add(*self._event(carried, cohort))
        epsilon = self.accountant.epsilon()
        return {"dp_epsilon": epsilon if math.isfinite(epsilon) else None, "dp_clip": float(clip)}
