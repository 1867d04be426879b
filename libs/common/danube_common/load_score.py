"""The broker load score: one definition for the load manager (placement), the planner's
plain-Python path and its Spark path (which computes the same formula column-wise from
:data:`FLOORS` and :class:`ScoreWeights`). Pure: no I/O.

Each dimension is divided by its mean over the candidate (active) brokers, so the score is
unitless and a dimension nobody is loaded on counts for little::

    score(b) = w_topics * topics(b) / mean(topics)
             + w_msgs   * (msg rate in + out)(b) / mean
             + w_bytes  * (byte rate in + out)(b) / mean
             + w_cpu    * (cpu cores used / cores)(b) / mean
             + w_memory * (rss / total memory)(b) / mean

Each mean is floored (:data:`FLOORS`: 1 topic, 100 msg/s, 100 KB/s, 10% of the cores, 10% of the
memory), so on an idle cluster the noise of a few thousandths of a core does not outweigh a
real topic. On a cluster with every dimension above its floor the mean score is the sum of the
weights. Lower is less loaded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field

from danube_common.config import Frozen
from danube_common.load import LoadReport

#: The score's dimensions, in the order they are documented and reported.
DIMENSIONS = ("topics", "msgs", "bytes", "cpu", "memory")

#: Smallest mean each dimension is divided by (see the module docstring).
FLOORS: Mapping[str, float] = {"topics": 1.0, "msgs": 100.0, "bytes": 100_000.0, "cpu": 0.1, "memory": 0.1}


class ScoreWeights(Frozen):
    """How much each dimension counts in a broker's load score (each is divided by its mean).
    The same section (``weights:``) configures the load manager and the planner; give both the
    same values, or they disagree about which broker is loaded."""

    topics: float = Field(default=1.0, ge=0)
    msgs: float = Field(default=1.0, ge=0)
    bytes: float = Field(default=1.0, ge=0)
    cpu: float = Field(default=0.5, ge=0)
    memory: float = Field(default=0.25, ge=0)

    def to_json(self) -> dict[str, float]:
        return {d: float(getattr(self, d)) for d in DIMENSIONS}


def cpu_fraction(report: LoadReport) -> float:
    """CPU cores used / cores of one report."""
    return report.cpu_usage / max(1, report.cpu_cores)


def memory_fraction(report: LoadReport) -> float:
    """Resident memory / machine memory of one report (0 when the machine's memory is unknown)."""
    return report.mem_rss_bytes / report.mem_total_bytes if report.mem_total_bytes > 0 else 0.0


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """What the score looks at for one broker."""

    broker_id: str
    topics: float
    #: Messages per second in + out.
    msgs: float = 0.0
    #: Bytes per second in + out.
    bytes: float = 0.0
    #: CPU cores used / cores.
    cpu: float = 0.0
    #: Resident memory / machine memory.
    memory: float = 0.0

    @staticmethod
    def of(broker_id: str, topics: int, report: LoadReport | None) -> BrokerLoad:
        """From a broker's latest report, with ``topics`` counted from ownership (fresher)."""
        if report is None:
            return BrokerLoad(broker_id, topics)
        return BrokerLoad(
            broker_id,
            topics,
            msgs=report.msg_rate_in + report.msg_rate_out,
            bytes=report.byte_rate_in + report.byte_rate_out,
            cpu=cpu_fraction(report),
            memory=memory_fraction(report),
        )

    def dimension(self, name: str) -> float:
        return float(getattr(self, name))


def floored_means(loads: Sequence[BrokerLoad]) -> dict[str, float]:
    """The mean of each dimension over ``loads``, floored (:data:`FLOORS`)."""
    n = len(loads)

    def mean(values: Iterable[float]) -> float:
        return math.fsum(values) / n if n else 0.0

    return {d: max(mean(b.dimension(d) for b in loads), FLOORS[d]) for d in DIMENSIONS}


def score(load: BrokerLoad, means: Mapping[str, float], weights: ScoreWeights) -> float:
    """One broker's score against already floored ``means``."""
    return math.fsum(getattr(weights, d) * load.dimension(d) / means[d] for d in DIMENSIONS)


def scores(loads: Sequence[BrokerLoad], weights: ScoreWeights) -> dict[str, float]:
    """broker_id -> score, the means taken over ``loads`` themselves."""
    means = floored_means(loads)
    return {b.broker_id: score(b, means, weights) for b in loads}
