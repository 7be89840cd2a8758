"""A run that stops itself when it falls behind marks it was given (run-config keys `prune-at`, `prune-score`).

`prune-at='20:0.55,40:0.61'`: at the end of round 20, if the run's `prune-score` (a validation column of its
rounds.jsonl, val_accuracy by default) is worse than 0.55 (lower for an accuracy, higher for a loss), the run stops
with status `pruned` and its reason names the round, the value and the mark; likewise at round 40. A round that did
not evaluate the column is not checked. `simulation.tune --prune median` sets the marks of each batch of trials
from the trials before it (docs/running/tuning.md#pruning): the check runs inside the run, so a pruned run is an
ordinary run folder that stopped early, whatever engine ran it, and the same marks stop it at the same round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fedsuite.config.settings import Settings, setting
from fedsuite.stages.server import ServerStage

PRUNED = "pruned"  # the run's status when a prune-at mark stopped it


def parse_marks(text: str) -> dict[int, float]:
    """'r:v,r:v' → {r: v}; ValueError naming what is wrong."""
    marks: dict[int, float] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        round_text, sep, value_text = part.partition(":")
        try:
            server_round, value = int(round_text), float(value_text)
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not 'round:value'") from None
        if not sep or server_round < 1 or value != value:
            raise ValueError(f"{part.strip()!r} is not 'round:value' with a round >= 1 and a number")
        if server_round in marks:
            raise ValueError(f"round {server_round} is given twice")
        marks[server_round] = value
    return marks


def format_marks(marks: Mapping[int, float]) -> str:
    """{r: v} → 'r:v,…' in round order, each value written so that it reads back exactly."""
    return ",".join(f"{r}:{float(v)!r}" for r, v in sorted(marks.items()))


def higher_is_better(score: str) -> bool:
    return "accuracy" in score


def sorted_marks(text: str) -> tuple[tuple[int, float], ...]:
    """`parse_marks(text)` as (round, value) pairs in round order (a frozen settings field)."""
    return tuple(sorted(parse_marks(str(text)).items()))


@dataclass(frozen=True)
class PruneSettings(Settings):
    """The pruning keys, typed settings (fedsuite/config/settings.py); without the keys, no marks.

    marks (prune-at): the (round, value) marks in round order; () = never pruned.
    score (prune-score): the validation column the marks are compared with.
    """

    marks: tuple[tuple[int, float], ...] = setting("prune-at", parse=sorted_marks)
    score: str = setting("prune-score")


class Pruning(ServerStage):
    """The marks of one run and the check at the end of each round (a round stage: fedsuite/stages/server.py)."""

    def __init__(self, marks: Mapping[int, float], score: str):
        self.marks, self.score = dict(marks), score

    @classmethod
    def from_run_config(cls, run_config: Mapping) -> Pruning:
        """The stage of a run config; one without the keys has no marks. ValueError for marks that do not parse."""
        return cls.from_settings(PruneSettings.from_values(run_config))

    @classmethod
    def from_settings(cls, settings: PruneSettings) -> Pruning:
        return cls(dict(settings.marks), settings.score)

    def check(self, server_round: int, metrics: Mapping) -> tuple[str, str] | None:
        """(`pruned`, reason) when this round has a mark and the run's score is worse; else None."""
        mark = self.marks.get(server_round)
        value = metrics.get(self.score)
        if mark is None or value is None:
            return None
        behind = value < mark if higher_is_better(self.score) else value > mark
        if not behind:
            return None
        side = "below" if higher_is_better(self.score) else "above"
        return PRUNED, f"round {server_round}: {self.score} {value:.6g} is {side} its prune-at mark {mark:.6g}"

    def check_row(self, server_round: int, metrics: Mapping) -> tuple[str, str] | None:
        return self.check(server_round, metrics)
