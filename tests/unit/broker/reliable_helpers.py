"""Builders for the reliable-dispatch unit tests: a subscription + engine over a FakeLog."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, SubType
from danube_broker.dispatch.reliable.engine import SubscriptionEngine
from danube_broker.dispatch.reliable.policy import SubscriptionPolicy
from danube_broker.dispatch.reliable.recent import RecentMessages
from danube_broker.stats import Counters
from danube_broker.subscription import Subscription
from danube_common.pb import DanubeApi_pb2 as pb
from tests.unit.broker.fake_log import FakeLog
from tests.unit.broker.helpers import Clock

TOPIC = "/default/rel"
#: The rigs' wall clock is their monotonic clock plus this (delayed delivery uses wall time).
WALL_OFFSET_S = 1_700_000_000.0


def record(i: int, *, key: str | None = None, t_ms: int = 1_000, deliver_at_ms: int = 0) -> bytes:
    m = pb.StreamMessage(
        payload=f"m{i}".encode(), producer_name="p", publish_time=t_ms, deliver_at_ms=deliver_at_ms
    )
    m.attributes["i"] = str(i)
    if key is not None:
        m.routing_key = key
    return m.SerializeToString()


async def publish(
    log: FakeLog, n: int, *, start: int | None = None, key: str | None = None, t_ms: int = 1_000
) -> int:
    first = log.next_offset if start is None else start
    return await log.append([record(first + i, key=key, t_ms=t_ms) for i in range(n)], [t_ms] * n)


class DeadLetters:
    """A dead-letter sink that records what it was given (and can be made to fail)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, Msg]] = []
        self.fail_times = 0

    async def publish(self, topic: str, msg: Msg) -> None:
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError("dead-letter topic unavailable")
        self.published.append((topic, msg))


@dataclass
class Rig:
    sub: Subscription
    engine: SubscriptionEngine
    log: FakeLog
    clock: Clock
    cursor_moves: list[int] = field(default_factory=list)
    next_id: int = 100

    def attach(
        self, name: str, *, window: int = 10, filters: tuple[str, ...] = (), stream: bool = True
    ) -> Consumer:
        self.next_id += 1
        c = self.sub.attach(
            consumer_name=name,
            sub_type=self.sub.sub_type,
            key_filters=filters,
            new_id=self.next_id,
            now=self.clock(),
            window=window,
        )
        if stream:
            c.open_stream()
        return c

    async def pump(self) -> int:
        """Fill and step until nothing more moves; return how many deliveries happened."""
        before = self.engine.delivered_total
        while True:
            added = await self.engine.fill()
            delivered = self.engine.step()
            if not added and not delivered:
                return self.engine.delivered_total - before


def make_rig(
    kind: SubType = SubType.EXCLUSIVE,
    *,
    policy: SubscriptionPolicy | None = None,
    log: FakeLog | None = None,
    cursor: int = -1,
    dead_letter: Any = None,
    max_pending: int = 10_000,
    read_batch: int = 256,
    recent: RecentMessages | None = None,
    max_delayed: int = 100_000,
    clock: Clock | None = None,
    compaction: Any = None,
) -> Rig:
    clock = clock or Clock()
    log = log or FakeLog()
    sub = Subscription(
        topic_name=TOPIC,
        name="s",
        sub_type=kind,
        queue_messages=1000,
        on_space=None,
        topic_counters=Counters(),
        now=clock(),
    )
    moves: list[int] = []
    engine = SubscriptionEngine(
        sub,
        log,
        policy=policy or SubscriptionPolicy(),
        cursor=cursor,
        clock=clock,
        topic_counters=Counters(),
        on_cursor=lambda: moves.append(engine.cursor),
        dead_letter=dead_letter,
        max_pending=max_pending,
        read_batch=read_batch,
        recent=recent,
        max_delayed=max_delayed,
        wall_clock=lambda: clock() + WALL_OFFSET_S,
        compaction=compaction,
    )
    sub.engine = engine
    return Rig(sub, engine, log, clock, moves)


def take(c: Consumer) -> list[Msg]:
    """What the consumer's stream would send now."""
    return c.queue.take(1_000_000)


def offsets(msgs: list[Msg]) -> list[int]:
    return [m.msg_id.topic_offset for m in msgs]
