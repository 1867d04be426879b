"""State of the fake cluster (tests/unit/sdk/fake_broker.py): topics, subscriptions, clients."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from danube_common.pb import DanubeApi_pb2 as pb


class Signal:
    """Wake every waiter on each notify (a fresh event per generation)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def waiter(self) -> asyncio.Event:
        return self._event


@dataclass
class FakeProducer:
    id: int
    name: str
    topic: str
    broker: int
    exclusive: bool


@dataclass
class FakeConsumer:
    id: int
    name: str
    topic: str
    subscription: str
    broker: int
    stream_gen: int = 0


@dataclass
class FakeSub:
    name: str
    sub_type: int
    cursor: int
    #: offset -> consumer id it was delivered to, until acked
    unacked: dict[int, int] = field(default_factory=dict)
    redeliver: deque[int] = field(default_factory=deque)
    acked: set[int] = field(default_factory=set)
    consumers: dict[str, int] = field(default_factory=dict)
    #: offset -> how many times it was delivered (redelivery_count of the next delivery)
    deliveries: dict[int, int] = field(default_factory=dict)
    #: Reads the topic's compacted view (set when created; a reader's on every attach).
    read_compacted: bool = False


@dataclass
class FakeTopic:
    name: str
    owner: int
    log: list[pb.StreamMessage] = field(default_factory=list)
    subs: dict[str, FakeSub] = field(default_factory=dict)
    changed: Signal = field(default_factory=Signal)
    #: producer name -> highest sequence id stored (idempotent producers)
    sequences: dict[str, int] = field(default_factory=dict)
    #: (producer name, sequence id) -> the offset it was stored at
    seq_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Offsets below this are served as the compacted view to read_compacted subscriptions.
    compaction_horizon: int = 0


@dataclass
class Frame:
    """A PublishBatch as the broker saw it."""

    broker: int
    topic: str
    producer_id: int
    batch_seq: int
    messages: list[pb.StreamMessage]

    @property
    def count(self) -> int:
        return len(self.messages)
