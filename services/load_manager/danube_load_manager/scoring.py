"""Which broker should take a topic: a score per active broker, lowest wins. Pure functions.

Each dimension is divided by its mean over the candidate brokers, so the score is
dimensionless and a dimension nobody is loaded on (mean 0) counts for nothing::

    score = w_topics * topics / mean(topics)
          + w_msgs   * (msg rate in + out) / mean
          + w_bytes  * (byte rate in + out) / mean
          + w_cpu    * (cpu cores used / cores) / mean
          + w_memory * (rss / total memory) / mean

Each mean is floored (``FLOORS``: 100 msg/s, 100 KB/s, 10% of the cores, 10% of the memory), so
on an idle cluster the noise of a few thousandths of a core does not outweigh a real topic.

``topics`` counts the topics the broker owns now (from ownership, fresher than any report) plus
what this pass has already assigned to it, so a burst of new topics spreads evenly between two
load reports. Ties go to the broker with fewer topics, then the smaller id (deterministic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from danube_common.load import LoadReport


@dataclass(frozen=True, slots=True)
class Weights:
    topics: float = 1.0
    msgs: float = 1.0
    bytes: float = 1.0
    cpu: float = 0.5
    memory: float = 0.25


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """What the score looks at for one broker."""

    broker_id: str
    topics: int
    msg_rate: float = 0.0
    byte_rate: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0

    @staticmethod
    def of(broker_id: str, topics: int, report: LoadReport | None) -> BrokerLoad:
        if report is None:
            return BrokerLoad(broker_id, topics)
        return BrokerLoad(
            broker_id,
            topics,
            msg_rate=report.msg_rate_in + report.msg_rate_out,
            byte_rate=report.byte_rate_in + report.byte_rate_out,
            cpu=report.cpu_usage / max(1, report.cpu_cores),
            memory=report.mem_rss_bytes / report.mem_total_bytes if report.mem_total_bytes else 0.0,
        )


#: Smallest mean each dimension is divided by (see the module docstring).
FLOORS = {"topics": 1.0, "msgs": 100.0, "bytes": 100_000.0, "cpu": 0.1, "memory": 0.1}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def scores(loads: Sequence[BrokerLoad], weights: Weights = Weights()) -> dict[str, float]:
    """broker_id -> score (lower is less loaded)."""
    dims = (
        ("topics", weights.topics, [float(b.topics) for b in loads]),
        ("msgs", weights.msgs, [b.msg_rate for b in loads]),
        ("bytes", weights.bytes, [b.byte_rate for b in loads]),
        ("cpu", weights.cpu, [b.cpu for b in loads]),
        ("memory", weights.memory, [b.memory for b in loads]),
    )
    out = {b.broker_id: 0.0 for b in loads}
    for name, weight, values in dims:
        mean = max(_mean(values), FLOORS[name])
        if weight == 0:
            continue
        for b, v in zip(loads, values, strict=True):
            out[b.broker_id] += weight * v / mean
    return out


def pick(loads: Sequence[BrokerLoad], weights: Weights = Weights()) -> str | None:
    """The least-loaded broker's id; None when there is no candidate."""
    if not loads:
        return None
    s = scores(loads, weights)
    return min(loads, key=lambda b: (round(s[b.broker_id], 9), b.topics, b.broker_id)).broker_id


class Placer:
    """Successive picks within one pass: each assignment counts against its broker at once."""

    def __init__(
        self,
        candidates: Sequence[str],
        topic_counts: Mapping[str, int],
        reports: Mapping[str, LoadReport],
        weights: Weights = Weights(),
    ) -> None:
        self._weights = weights
        self._topics = {b: topic_counts.get(b, 0) for b in candidates}
        self._reports = reports

    def loads(self, exclude: str = "") -> list[BrokerLoad]:
        return [
            BrokerLoad.of(b, n, self._reports.get(b)) for b, n in sorted(self._topics.items()) if b != exclude
        ]

    def pick(self, *, exclude: str = "") -> str | None:
        choice = pick(self.loads(exclude), self._weights)
        if choice is not None:
            self._topics[choice] += 1
        return choice

    def moved_away(self, broker_id: str) -> None:
        if broker_id in self._topics:
            self._topics[broker_id] = max(0, self._topics[broker_id] - 1)
