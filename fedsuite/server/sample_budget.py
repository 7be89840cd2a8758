"""DP-SGD's server stage (dp-sgd=true, docs/privacy-dp-sgd.md): every row says whether its noise is secret, and a
target ε (dp-target-epsilon) ends the run.

The clients hold the budget: each computes its own ε(δ), and a round that would take it past the target releases
nothing (fedsuite.privacy.dp_sgd.PrivacyBudgetSpent). The server turns that into the run's end:
- before a round, a sampled client whose last reply said one more round takes it past the target stops the run
  there (status budget-spent, no row for the round);
- a client that refused a round ends the run at that round: the round is not applied and gets no row.
Clients the server has not heard from yet are covered by their own refusal.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedsuite.config.run_config import SampleLevelPrivacy
from fedsuite.privacy.dp_sgd import NEXT_EPSILON_METRIC
from fedsuite.results.folder import noise_source_label
from fedsuite.rules.rounds import Reply
from fedsuite.server.replies import describe_failure
from fedsuite.stages.server import ServerStage

REFUSAL = "PrivacyBudgetSpent"  # the class name a client's refusal carries through Flower's error reply


class SampleLevelBudget(ServerStage):
    """A round stage (fedsuite/stages/server.py): stop before a round that passes the target, end the run at a
    round a client refused, keep what each reply says of its client's next ε; label every row's noise."""

    handles_vectors = False  # it reads the replies' metrics and the cohort, never an array

    def __init__(self, target: float, noise_source: str = "secure"):
        self.target, self.noise_source = target, noise_source
        self._next: dict[int, float] = {}  # partition → its ε(δ) should one more round draw it (last reply)

    @classmethod
    def of_run(cls, run_config) -> SampleLevelBudget | None:
        """The run's DP-SGD stage when dp-sgd=true (a target of 0 stops nothing), else None."""
        settings = SampleLevelPrivacy.from_values(run_config)
        return cls(settings.target_epsilon, settings.noise_source) if settings.enabled else None

    def row_labels(self) -> dict:
        return {"dp_noise": noise_source_label(self.noise_source)}  # secret, or seeded: not private

    def release(self, server_round: int, replies: list[Reply]) -> dict:
        """Keep what each reply says one more round would bring its client's ε to (the replies are not changed)."""
        for reply in replies:
            if NEXT_EPSILON_METRIC in reply.metrics:
                self._next[reply.partition_id] = float(reply.metrics[NEXT_EPSILON_METRIC])
        return {}

    def stop_before(self, server_round: int, cohort: Sequence[int]) -> str | None:
        """Why the run stops before `server_round`, or None: a sampled client known to pass the target in it."""
        if self.target <= 0:
            return None
        over = sorted((eps, pid) for pid in cohort if (eps := self._next.get(pid, 0.0)) > self.target)
        if not over:
            return None
        eps, pid = over[-1]
        return (f"dp-target-epsilon={self.target:g} reached (DP-SGD): round {server_round} would take client "
                f"{pid}'s ε to {eps:.4g}")  # fmt: skip

    def refused(self, server_round: int, results: Sequence, failures: Sequence) -> str | None:
        """Why the run ends at `server_round` without applying it, or None: a client refused to release its round
        (its reply's error, or a failure carrying the refusal)."""
        said = [str((res.metrics or {}).get("error", "")) for _, res in results]
        said += [describe_failure(f) for f in failures]
        refused = [text for text in said if REFUSAL in text]
        if not refused:
            return None
        why = refused[0].rstrip("'>").split("dp-target-epsilon=", 1)
        detail = f": dp-target-epsilon={why[1]}" if len(why) == 2 else ""
        return (f"dp-target-epsilon={self.target:g} reached (DP-SGD): {len(refused)} client(s) refused round "
                f"{server_round}, which is not applied{detail}")  # fmt: skip
