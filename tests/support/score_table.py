"""One table of broker loads and their load scores, worked out by hand, that every path computing
the score is checked against: the shared module, the load manager's placer, the planner's
plain-Python aggregation and its Spark aggregation. If any of them drifts, its test fails."""

from __future__ import annotations

from dataclasses import dataclass

from danube_common.load import LoadReport, TopicLoad
from danube_common.load_score import ScoreWeights

GIB = 1 << 30


@dataclass(frozen=True)
class Broker:
    broker_id: str
    #: Owned topics; the first carries all the traffic below, the rest are idle.
    topics: int
    msg_in: float = 0.0
    msg_out: float = 0.0
    byte_in: float = 0.0
    byte_out: float = 0.0
    cpu_usage: float = 0.0
    cores: int = 2
    rss: int = 0
    #: 0: the machine's memory is unknown (the memory dimension is 0).
    total: int = 0

    def topic_names(self) -> list[str]:
        return [f"/score/{self.broker_id}-t{i}" for i in range(self.topics)]

    def report(self, at_ms: int) -> LoadReport:
        rows = [
            TopicLoad(
                name,
                msg_rate_in=self.msg_in if i == 0 else 0.0,
                msg_rate_out=self.msg_out if i == 0 else 0.0,
                byte_rate_in=self.byte_in if i == 0 else 0.0,
                byte_rate_out=self.byte_out if i == 0 else 0.0,
            )
            for i, name in enumerate(self.topic_names())
        ]
        return LoadReport.build(
            self.broker_id,
            at_ms,
            rows,
            interval_s=5.0,
            cpu_usage=self.cpu_usage,
            cpu_cores=self.cores,
            mem_rss_bytes=self.rss,
            mem_total_bytes=self.total,
            max_topics=10_000,
        )


@dataclass(frozen=True)
class Case:
    name: str
    brokers: tuple[Broker, ...]
    weights: ScoreWeights
    #: broker_id -> score, computed by hand (the arithmetic is in the comments).
    expected: dict[str, float]

    def least_loaded(self) -> str:
        return min(self.expected, key=lambda b: (self.expected[b], b))


CASES = [
    Case(
        # means: topics 2; every other dimension is idle and floored.
        # a = 1/2, b = 3/2
        "topic counts only",
        (Broker("a", 1), Broker("b", 3)),
        ScoreWeights(),
        {"a": 0.5, "b": 1.5},
    ),
    Case(
        # means: topics 1.5, msgs 600, bytes 600k, cpu (0.5 + 0.1)/2 = 0.3, memory (0.25 + 0.125)/2
        # = 0.1875, all above their floors, so the two scores add up to 2 * (sum of weights).
        # a = 2/1.5 + 1000/600 + 1e6/6e5 + 0.5*0.5/0.3 + 0.25*0.25/0.1875 = 35/6
        # b = 1/1.5 +  200/600 + 2e5/6e5 + 0.5*0.1/0.3 + 0.25*0.125/0.1875 = 10/6
        "every dimension above its floor",
        (
            Broker("a", 2, msg_in=1000, byte_in=1e6, cpu_usage=1.0, rss=2 * GIB, total=8 * GIB),
            Broker("b", 1, msg_out=200, byte_out=2e5, cpu_usage=0.2, rss=1 * GIB, total=8 * GIB),
        ),
        ScoreWeights(),
        {"a": 35 / 6, "b": 10 / 6},
    ),
    Case(
        # weights: topics 2, cpu 1, the rest 0. means: topics 3, cpu 0.00333 -> floor 0.1.
        # a = 2*5/3 + 0.001/0.1, b = 2*4/3 + 0.009/0.1, c = 0
        "idle CPU noise under the floor, custom weights",
        (
            Broker("a", 5, msg_in=3, cpu_usage=0.002),
            Broker("b", 4, msg_in=9, cpu_usage=0.018),
            Broker("c", 0),
        ),
        ScoreWeights(topics=2, msgs=0, bytes=0, cpu=1, memory=0),
        {"a": 10 / 3 + 0.01, "b": 8 / 3 + 0.09, "c": 0.0},
    ),
    Case(
        # means: topics 1, msgs (10000 + 10)/2 = 5005, bytes (1e6 + 1000)/2 = 500.5k; cpu and
        # memory idle (floored).
        # a = 1/1 + 10000/5005 + 1e6/500500, b = 1/1 + 10/5005 + 1000/500500
        "rates outweigh a topic",
        (
            Broker("a", 1, msg_in=10_000, byte_in=1e6),
            Broker("b", 1, msg_in=10, byte_in=1000),
        ),
        ScoreWeights(),
        {"a": 1 + 10_000 / 5005 + 1e6 / 500_500, "b": 1 + 10 / 5005 + 1000 / 500_500},
    ),
]
