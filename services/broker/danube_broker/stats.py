"""Per-topic and per-subscription counters, kept as plain attributes on the hot path.

Counting is a few integer additions per batch; readers (load reports, later) take a
:class:`TopicStats` snapshot, a frozen value that is safe to hand around.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Counters:
    #: Messages and payload bytes accepted from producers.
    msgs_in: int = 0
    bytes_in: int = 0
    #: Messages and payload bytes handed to consumer queues (one count per subscription).
    msgs_out: int = 0
    bytes_out: int = 0
    #: Messages not delivered to a subscription: no consumer to take them, or a full queue
    #: (slow consumer; see ``slow_consumer_policy``).
    msgs_dropped: int = 0


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    name: str
    sub_type: str
    consumers: int
    connected_consumers: int
    msgs_out: int
    bytes_out: int
    msgs_dropped: int
    acks: int
    nacks: int
    #: Messages waiting in this subscription's consumer queues.
    backlog: int


@dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    dispatch_strategy: str
    msgs_in: int
    bytes_in: int
    msgs_out: int
    bytes_out: int
    msgs_dropped: int
    producers: int
    consumers: int
    subscriptions: int
    #: Next offset to be assigned (= messages published since the topic was loaded here).
    next_offset: int
    per_subscription: dict[str, SubscriptionStats] = field(default_factory=dict)
