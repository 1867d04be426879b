"""Which broker should take a topic: the least loaded by the shared load score
(:mod:`danube_common.load_score`), counting what this pass has already assigned. Pure functions.

``topics`` counts the topics the broker owns now (from ownership, fresher than any report) plus
what this pass has already assigned to it, so a burst of new topics spreads evenly between two
load reports. Ties go to the broker with fewer topics, then the smaller id (deterministic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from danube_common.load import LoadReport
from danube_common.load_score import BrokerLoad, ScoreWeights, scores


def pick(loads: Sequence[BrokerLoad], weights: ScoreWeights = ScoreWeights()) -> str | None:
    """The least-loaded broker's id; None when there is no candidate."""
    return pick_scored(loads, weights)[0]


def pick_scored(
    loads: Sequence[BrokerLoad], weights: ScoreWeights = ScoreWeights()
) -> tuple[str | None, dict[str, float]]:
    """:func:`pick`, and the score of every candidate it chose from (why it chose)."""
    if not loads:
        return None, {}
    s = scores(loads, weights)
    return min(loads, key=lambda b: (round(s[b.broker_id], 9), b.topics, b.broker_id)).broker_id, s


class Placer:
    """Successive picks within one pass: each assignment counts against its broker at once."""

    def __init__(
        self,
        candidates: Sequence[str],
        topic_counts: Mapping[str, int],
        reports: Mapping[str, LoadReport],
        weights: ScoreWeights = ScoreWeights(),
    ) -> None:
        self._weights = weights
        self._topics = {b: topic_counts.get(b, 0) for b in candidates}
        self._reports = reports
        #: The candidates' scores at the last pick (for the decision's trace).
        self.last_scores: tuple[tuple[str, float], ...] = ()

    def loads(self, exclude: str = "") -> list[BrokerLoad]:
        return [
            BrokerLoad.of(b, n, self._reports.get(b)) for b, n in sorted(self._topics.items()) if b != exclude
        ]

    def pick(self, *, exclude: str = "") -> str | None:
        choice, s = pick_scored(self.loads(exclude), self._weights)
        self.last_scores = tuple(sorted(s.items()))
        if choice is not None:
            self._topics[choice] += 1
        return choice

    def moved_away(self, broker_id: str) -> None:
        if broker_id in self._topics:
            self._topics[broker_id] = max(0, self._topics[broker_id] - 1)
