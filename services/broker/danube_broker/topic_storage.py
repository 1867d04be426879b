"""How a topic stores and dispatches what is published: one strategy object per topic.

A :class:`~danube_broker.topic.Topic` keeps what every topic has (identity, producers,
subscriptions, counters, sealing and closing) and hands the rest to its :class:`TopicStorage`:

- :class:`InMemoryStorage`, for non-reliable topics (and every topic until its metadata says
  otherwise): offsets start at 0 each time the topic is loaded here, a batch is stamped and the
  same list of message objects is handed to every subscription
  (:class:`~danube_broker.dispatch.non_reliable.NonReliableDispatch`). Nothing is kept across
  moves. Everything is synchronous bookkeeping except the dispatch, which awaits only under the
  ``block`` slow-consumer policy.
- :class:`ReliableStorage`, for topics whose metadata says ``dispatch_strategy == "reliable"``:
  opens the topic's :class:`~danube_broker.reliable_topic.ReliableTopic` (the log, the durable
  subscriptions and their engines) in a task of its own, then serves through it. Until it is
  open, clients get a retryable error saying what the opening waits for.

The topic picks its storage once, when it accepts a reliable record (``Topic.accept_record``).
The storages and the ReliableTopic see the topic only through :class:`TopicHost`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from danube_broker.config import BrokerConfig
from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, PublishDone, PublishResult, PublishStream, SubType
from danube_broker.dispatch.non_reliable import NonReliableDispatch
from danube_broker.reliable_topic import ReliableContext, ReliableTopic
from danube_broker.stats import Counters, TieredStats
from danube_broker.subscription import Subscription
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError, Unavailable
from danube_common.records import TopicRecord
from danube_common.topic_name import TopicName

if TYPE_CHECKING:
    from danube_broker.producer import Producer
    from danube_broker.takeover import LogOpening


class TopicHost(Protocol):
    """What a :class:`~danube_broker.reliable_topic.ReliableTopic` uses of the topic it serves."""

    name: str
    topic_name: TopicName
    #: Ownership epoch; raised by the ReliableTopic when it finds the owner key moved on.
    epoch: int
    #: Shared with the topic: the ReliableTopic adds and restores its durable subscriptions here.
    subscriptions: dict[str, Subscription]
    counters: Counters

    @property
    def closed(self) -> bool: ...

    def check_open(self) -> None: ...

    def stamp(self, producer: Producer, msgs: list[Msg], first: int, now_ms: int) -> None: ...

    def count_in(self, msgs: int, nbytes: int) -> None: ...


class StorageHost(TopicHost, Protocol):
    """What a storage uses of its topic: the ReliableTopic's part, and whether producers may publish."""

    def check_accepting(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StorageStats:
    """The storage's part of :class:`~danube_broker.stats.TopicStats` (defaults: non-reliable)."""

    next_offset: int
    durability: str = ""
    first_offset: int = 0
    local_first_offset: int = 0
    wal_bytes: int = 0
    wal_segments: int = 0
    tiered: TieredStats | None = None
    log_stint: tuple[str, int, int, int] | None = None
    state: str = ""
    accepted_gaps: tuple[tuple[int, int, str, str, int, str], ...] = ()


class TopicStorage(Protocol):
    """The interface :class:`~danube_broker.topic.Topic` serves its topic through."""

    @property
    def reliable(self) -> ReliableTopic | None:
        """The open ReliableTopic (None: a non-reliable topic, or not open yet)."""
        ...

    @property
    def next_offset(self) -> int: ...

    async def open(self, record: TopicRecord, *, wait_s: float | None) -> None:
        """Make the storage ready for ``record`` (the topic's adopted metadata)."""
        ...

    async def subscribe(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
        initial_position: str,
        max_unacked: int,
        read_compacted: bool = False,
    ) -> Consumer: ...

    async def publish(
        self, producer: Producer, msgs: list[Msg], nbytes: int, *, stream: PublishStream | None
    ) -> PublishResult: ...

    def publish_now(
        self,
        producer: Producer,
        msgs: list[Msg],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
    ) -> bool:
        """:meth:`publish` without a task when nothing needs waiting for (True: ``done`` gets
        the outcome later); False, having done nothing, otherwise."""
        ...

    async def delete_subscription(self, sub: Subscription) -> None: ...

    def stop(self) -> None:
        """The synchronous part of closing the topic (before its subscriptions are let go)."""
        ...

    async def aclose(self, subscriptions: list[Subscription]) -> None:
        """After :meth:`stop`: finish closing; ``subscriptions`` are those the topic let go."""
        ...

    def stats(self) -> StorageStats: ...


class InMemoryStorage:
    """Non-reliable topics: offsets counted here, batches fanned out to every subscription."""

    def __init__(self, host: StorageHost, cfg: BrokerConfig) -> None:
        self._host = host
        self._cfg = cfg
        self.next_offset = 0
        self._dispatch = NonReliableDispatch(
            lambda: host.subscriptions,
            block=cfg.slow_consumer_policy == "block",
            block_timeout_s=cfg.slow_consumer_block_timeout_s,
        )
        #: Serialises publishes under the block policy, so a blocked batch cannot be overtaken.
        self._order = asyncio.Lock()

    @property
    def reliable(self) -> ReliableTopic | None:
        return None

    async def open(self, record: TopicRecord, *, wait_s: float | None) -> None:
        return None

    def add_consumer(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
    ) -> Consumer:
        host = self._host
        host.check_open()
        sub = host.subscriptions.get(subscription)
        if sub is None:
            sub = Subscription(
                topic_name=host.name,
                name=subscription,
                sub_type=sub_type,
                queue_messages=self._cfg.consumer_queue_messages,
                on_space=self._dispatch.on_space,
                topic_counters=host.counters,
                now=now,
            )
            consumer = sub.attach(
                consumer_name=consumer_name,
                sub_type=sub_type,
                key_filters=key_filters,
                new_id=new_id,
                now=now,
            )
            host.subscriptions[subscription] = sub
            return consumer
        return sub.attach(
            consumer_name=consumer_name, sub_type=sub_type, key_filters=key_filters, new_id=new_id, now=now
        )

    async def subscribe(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
        initial_position: str,
        max_unacked: int,
        read_compacted: bool = False,
    ) -> Consumer:
        """:meth:`add_consumer` (``initial_position``, ``max_unacked`` and ``read_compacted`` do
        not apply: the registry refuses ``read_compacted`` on these topics)."""
        return self.add_consumer(
            subscription=subscription,
            consumer_name=consumer_name,
            sub_type=sub_type,
            key_filters=key_filters,
            new_id=new_id,
            now=now,
        )

    async def publish(
        self, producer: Producer, msgs: list[Msg], nbytes: int, *, stream: PublishStream | None
    ) -> PublishResult:
        return PublishResult(await self.dispatch(producer, msgs, nbytes), len(msgs))

    def publish_now(
        self,
        producer: Producer,
        msgs: list[Msg],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
    ) -> bool:
        return False  # in memory: publish is quick already

    async def dispatch(self, producer: Producer, msgs: list[Msg], nbytes: int) -> int:
        """Assign offsets to ``msgs``, stamp them and dispatch; return the first offset."""
        if self._dispatch.block:
            async with self._order:
                self._host.check_accepting()
                first = self._stamp(producer, msgs, nbytes)
                await self._dispatch.dispatch(msgs, nbytes)
                return first
        self._host.check_accepting()
        first = self._stamp(producer, msgs, nbytes)
        await self._dispatch.dispatch(msgs, nbytes)
        return first

    def _stamp(self, producer: Producer, msgs: list[Msg], nbytes: int) -> int:
        first = self.next_offset
        self.next_offset = first + len(msgs)
        self._host.stamp(producer, msgs, first, 0)
        self._host.count_in(len(msgs), nbytes)
        return first

    async def delete_subscription(self, sub: Subscription) -> None:
        return None  # nothing durable

    def stop(self) -> None:
        self._dispatch.notify_space()  # a publish blocked on a consumer gives up at once

    async def aclose(self, subscriptions: list[Subscription]) -> None:
        return None

    def stats(self) -> StorageStats:
        return StorageStats(next_offset=self.next_offset)


class ReliableStorage:
    """Reliable topics: the ReliableTopic, opened in a task of its own, and served through."""

    def __init__(self, host: StorageHost, cfg: BrokerConfig, ctx: ReliableContext | None) -> None:
        self._host = host
        self._cfg = cfg
        self._ctx = ctx
        #: The log and durable subscriptions, once open.
        self.reliable: ReliableTopic | None = None
        self._open_lock = asyncio.Lock()
        self._opening_task: asyncio.Task[None] | None = None
        #: While the ReliableTopic opens: what it is doing (waiting for a previous owner...).
        self.opening: LogOpening | None = None

    @property
    def next_offset(self) -> int:
        return self.reliable.log.next_offset if self.reliable is not None else 0

    async def open(self, record: TopicRecord, *, wait_s: float | None) -> None:
        """Open the log and subscriptions (once).

        The opening runs in a task of its own (it may wait long for a previous owner's log end,
        see :mod:`danube_broker.takeover`); ``wait_s`` bounds how long this call waits for it
        (None: until done), after which a retryable error says what the opening waits for."""
        if self.reliable is not None:
            return
        self._host.check_open()
        if self._ctx is None:
            raise Unavailable(
                f"topic {self._host.name} is reliable and this broker has no storage configured"
            )
        task = self._opening_task
        if task is None:
            task = self._opening_task = asyncio.ensure_future(self._open(record))
            task.add_done_callback(self._opening_done)
        if wait_s is None:
            await asyncio.shield(task)
            return
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if not done:
            raise self.opening_error()
        task.result()

    def _opening_done(self, task: asyncio.Task[None]) -> None:
        if self._opening_task is task:
            self._opening_task = None
        if not task.cancelled():
            task.exception()  # retrieved: callers that gave up waiting may never look

    async def _open(self, record: TopicRecord) -> None:
        assert self._ctx is not None
        host = self._host
        async with self._open_lock:
            if self.reliable is not None:
                return
            host.check_open()
            opened = await ReliableTopic.open(
                host, record, cfg=self._cfg, ctx=self._ctx, on_opening=self._set_opening
            )
            if host.closed:
                await opened.aclose()
                host.check_open()
            self.reliable = opened

    def _set_opening(self, opening: LogOpening | None) -> None:
        self.opening = opening

    def opening_error(self) -> DanubeError:
        """What a client is told while the ReliableTopic is not open yet."""
        opening = self.opening
        if opening is not None and opening.waiting is not None:
            return opening.waiting.error(self._host.name)
        return Unavailable(f"reliable topic {self._host.name} is still opening; retry")

    def _open_or_raise(self) -> ReliableTopic:
        if self.reliable is None:
            raise self.opening_error()
        return self.reliable

    async def subscribe(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
        initial_position: str,
        max_unacked: int,
        read_compacted: bool = False,
    ) -> Consumer:
        """A durable subscription (created in etcd when new)."""
        self._host.check_open()
        return await self._open_or_raise().subscribe(
            subscription=subscription,
            consumer_name=consumer_name,
            sub_type=sub_type,
            key_filters=key_filters,
            new_id=new_id,
            now=now,
            initial_position=initial_position,
            max_unacked=max_unacked,
            read_compacted=read_compacted,
        )

    async def publish(
        self, producer: Producer, msgs: list[Msg], nbytes: int, *, stream: PublishStream | None
    ) -> PublishResult:
        self._host.check_accepting()
        return await self._open_or_raise().publish(producer, msgs, nbytes, stream=stream)

    def publish_now(
        self,
        producer: Producer,
        msgs: list[Msg],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
    ) -> bool:
        rt = self.reliable
        if rt is None:
            return False
        try:
            self._host.check_accepting()
        except DanubeError:
            return False  # publish raises it
        return rt.publish_now(producer, msgs, nbytes, stream, done)

    async def delete_subscription(self, sub: Subscription) -> None:
        """The durable part of unsubscribing: engine, metadata, cursor."""
        if sub.engine is not None and self.reliable is not None:
            await self.reliable.unsubscribe(sub)

    def stop(self) -> None:
        if self.reliable is not None:
            self.reliable.stop()

    async def aclose(self, subscriptions: list[Subscription]) -> None:
        """Write the cursors and close the log. Waits for an opening in progress (it closes
        what it opened when it sees the topic closed)."""
        await cancel_and_wait(self._opening_task)
        async with self._open_lock:
            reliable, self.reliable = self.reliable, None
            if reliable is not None:
                await reliable.aclose(subscriptions)
                await reliable.discard_if_deleted()

    def stats(self) -> StorageStats:
        rt = self.reliable
        if rt is None:
            return StorageStats(next_offset=0, state=self.opening_error().message)
        wal_bytes, wal_segments = rt.wal_stats()
        return StorageStats(
            next_offset=rt.log.next_offset,
            durability=rt.policies.durability.value,
            first_offset=rt.log.first_offset,
            local_first_offset=rt.local.first_offset,
            wal_bytes=wal_bytes,
            wal_segments=wal_segments,
            tiered=rt.tiered_stats(),
            log_stint=rt.stint_stats(),
            accepted_gaps=rt.gap_stats(),
        )
