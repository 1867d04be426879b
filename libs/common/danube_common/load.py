"""Broker load reports: what a broker publishes at ``/{cluster}/load/{broker_id}`` every few seconds.

Written by the broker on its registration lease (a dead broker's report vanishes with it), read by
the load manager (placement scoring), the admin API (``danube-admin brokers list``) and the Spark
planner. Rates are measured by the broker between two reports (counter deltas over the interval),
so a report says what happened in the last interval, not since start.

JSON shape (compact: topics are rows under a ``topic_fields`` header, so a broker with thousands
of topics stays well under etcd's request size limit)::

    {"broker_id": "b1", "at_ms": 1700000000000, "interval_s": 5.0,
     "cpu_usage": 0.42, "cpu_cores": 2, "mem_rss_bytes": 123456789, "mem_total_bytes": 25000000000,
     "topic_count": 3, "msg_rate_in": 1000.0, "byte_rate_in": 100000.0, "msg_rate_out": 1000.0,
     "byte_rate_out": 100000.0, "backlog": 12, "producers": 3, "consumers": 3,
     "topic_fields": ["topic", "msg_rate_in", "byte_rate_in", "msg_rate_out", "byte_rate_out",
                      "backlog", "producers", "consumers", "reliable"],
     "topics": [["/default/t1", 500.0, 50000.0, 500.0, 50000.0, 0, 1, 1, true], ...],
     "topics_truncated": false}

Totals always cover every topic; ``topics`` lists at most ``max_topics`` rows, the busiest first
(``topics_truncated`` says whether some were left out).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

TOPIC_FIELDS: tuple[str, ...] = (
    "topic",
    "msg_rate_in",
    "byte_rate_in",
    "msg_rate_out",
    "byte_rate_out",
    "backlog",
    "producers",
    "consumers",
    "reliable",
)


#: A message counts as this many bytes in a topic's traffic weight (:attr:`TopicLoad.weight`;
#: the planner splits a broker's CPU and memory over its topics by this weight).
MSG_COST_BYTES = 100.0


@dataclass(frozen=True, slots=True)
class TopicLoad:
    topic: str
    msg_rate_in: float = 0.0
    byte_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    byte_rate_out: float = 0.0
    backlog: int = 0
    producers: int = 0
    consumers: int = 0
    reliable: bool = False

    @property
    def weight(self) -> float:
        """One number for "how busy": bytes in and out, plus :data:`MSG_COST_BYTES` a message."""
        return (
            self.byte_rate_in + self.byte_rate_out + MSG_COST_BYTES * (self.msg_rate_in + self.msg_rate_out)
        )

    def row(self) -> list[Any]:
        return [
            self.topic,
            round(self.msg_rate_in, 3),
            round(self.byte_rate_in, 3),
            round(self.msg_rate_out, 3),
            round(self.byte_rate_out, 3),
            self.backlog,
            self.producers,
            self.consumers,
            self.reliable,
        ]


@dataclass(frozen=True, slots=True)
class LoadReport:
    broker_id: str
    at_ms: int
    interval_s: float = 0.0
    #: CPU used by the broker process over the interval, in cores (1.0 = one core busy).
    cpu_usage: float = 0.0
    cpu_cores: int = 1
    mem_rss_bytes: int = 0
    mem_total_bytes: int = 0
    topic_count: int = 0
    msg_rate_in: float = 0.0
    byte_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    byte_rate_out: float = 0.0
    backlog: int = 0
    producers: int = 0
    consumers: int = 0
    topics: tuple[TopicLoad, ...] = field(default_factory=tuple)
    topics_truncated: bool = False

    @classmethod
    def build(
        cls,
        broker_id: str,
        at_ms: int,
        topics: Iterable[TopicLoad],
        *,
        interval_s: float,
        cpu_usage: float,
        cpu_cores: int,
        mem_rss_bytes: int,
        mem_total_bytes: int,
        max_topics: int,
    ) -> LoadReport:
        """Totals over every topic; the ``max_topics`` busiest listed (ties: by name)."""
        all_topics = list(topics)
        listed = busiest(all_topics, max_topics)
        return cls(
            broker_id=broker_id,
            at_ms=at_ms,
            interval_s=round(interval_s, 3),
            cpu_usage=round(cpu_usage, 4),
            cpu_cores=cpu_cores,
            mem_rss_bytes=mem_rss_bytes,
            mem_total_bytes=mem_total_bytes,
            topic_count=len(all_topics),
            msg_rate_in=sum(t.msg_rate_in for t in all_topics),
            byte_rate_in=sum(t.byte_rate_in for t in all_topics),
            msg_rate_out=sum(t.msg_rate_out for t in all_topics),
            byte_rate_out=sum(t.byte_rate_out for t in all_topics),
            backlog=sum(t.backlog for t in all_topics),
            producers=sum(t.producers for t in all_topics),
            consumers=sum(t.consumers for t in all_topics),
            topics=tuple(listed),
            topics_truncated=len(listed) < len(all_topics),
        )

    def topic(self, name: str) -> TopicLoad | None:
        for t in self.topics:
            if t.topic == name:
                return t
        return None

    def to_json(self, *, rows: bool = True) -> dict[str, Any]:
        """``rows=False``: ``topics`` left empty (a caller that encodes the rows itself)."""
        return {
            "broker_id": self.broker_id,
            "at_ms": self.at_ms,
            "interval_s": self.interval_s,
            "cpu_usage": self.cpu_usage,
            "cpu_cores": self.cpu_cores,
            "mem_rss_bytes": self.mem_rss_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "topic_count": self.topic_count,
            "msg_rate_in": round(self.msg_rate_in, 3),
            "byte_rate_in": round(self.byte_rate_in, 3),
            "msg_rate_out": round(self.msg_rate_out, 3),
            "byte_rate_out": round(self.byte_rate_out, 3),
            "backlog": self.backlog,
            "producers": self.producers,
            "consumers": self.consumers,
            "topic_fields": list(TOPIC_FIELDS),
            "topics": [t.row() for t in self.topics] if rows else [],
            "topics_truncated": self.topics_truncated,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoadReport:
        """Tolerant of added fields (newer brokers) and of topic columns in any order."""
        fields = d.get("topic_fields") or list(TOPIC_FIELDS)
        topics = []
        for row in d.get("topics", []):
            values = dict(zip(fields, row, strict=False))
            topics.append(
                TopicLoad(
                    topic=str(values.get("topic", "")),
                    msg_rate_in=float(values.get("msg_rate_in", 0.0)),
                    byte_rate_in=float(values.get("byte_rate_in", 0.0)),
                    msg_rate_out=float(values.get("msg_rate_out", 0.0)),
                    byte_rate_out=float(values.get("byte_rate_out", 0.0)),
                    backlog=int(values.get("backlog", 0)),
                    producers=int(values.get("producers", 0)),
                    consumers=int(values.get("consumers", 0)),
                    reliable=bool(values.get("reliable", False)),
                )
            )
        return cls(
            broker_id=str(d["broker_id"]),
            at_ms=int(d.get("at_ms", 0)),
            interval_s=float(d.get("interval_s", 0.0)),
            cpu_usage=float(d.get("cpu_usage", 0.0)),
            cpu_cores=int(d.get("cpu_cores", 1)),
            mem_rss_bytes=int(d.get("mem_rss_bytes", 0)),
            mem_total_bytes=int(d.get("mem_total_bytes", 0)),
            topic_count=int(d.get("topic_count", len(topics))),
            msg_rate_in=float(d.get("msg_rate_in", 0.0)),
            byte_rate_in=float(d.get("byte_rate_in", 0.0)),
            msg_rate_out=float(d.get("msg_rate_out", 0.0)),
            byte_rate_out=float(d.get("byte_rate_out", 0.0)),
            backlog=int(d.get("backlog", 0)),
            producers=int(d.get("producers", 0)),
            consumers=int(d.get("consumers", 0)),
            topics=tuple(topics),
            topics_truncated=bool(d.get("topics_truncated", False)),
        )


def busiest(topics: list[TopicLoad], n: int) -> list[TopicLoad]:
    """The ``n`` topics of highest weight, ties by name: ``sorted(topics, key=(-weight, topic))[:n]``.

    Rates are never negative, so the topics with traffic come first and the idle ones (weight 0,
    most of a broker's topics) follow by name; only those with traffic are weighed in Python,
    the idle ones are ordered by a C-level key (the report is built every few seconds over every
    topic of the broker)."""
    n = max(0, n)
    busy = [t for t in topics if t.msg_rate_in or t.msg_rate_out or t.byte_rate_in or t.byte_rate_out]
    busy.sort(key=lambda t: (-t.weight, t.topic))
    if len(busy) >= n:
        return busy[:n]
    idle = [t for t in topics if not (t.msg_rate_in or t.msg_rate_out or t.byte_rate_in or t.byte_rate_out)]
    idle.sort(key=_by_name)
    return busy + idle[: n - len(busy)]


_by_name = operator.attrgetter("topic")


def rate(now_count: int, prev_count: int, interval_s: float) -> float:
    """Events per second between two readings of a monotonic counter (a reset reads as 0)."""
    if interval_s <= 0 or now_count < prev_count:
        return 0.0
    return (now_count - prev_count) / interval_s
