"""The consumer users hold: one subscription over every partition of a topic."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

from danube_common.aio import LoopEvent, cancel_and_wait
from danube_common.errors import DanubeError, InvalidArgument
from danube_sdk.acks import AckBuffer
from danube_sdk.connection import Connections
from danube_sdk.errors import ClientClosed, ClientTimeout
from danube_sdk.options import ClientOptions, ConsumerOptions
from danube_sdk.packs import PackedEntryMessage
from danube_sdk.receive_queue import ReceiveQueue
from danube_sdk.retry import backoff_s, retry_until
from danube_sdk.start_position import StartPosition
from danube_sdk.streams import first_error
from danube_sdk.topic_consumer import TopicConsumer
from danube_sdk.tracing import ProcessSpans, active_tracer
from danube_sdk.types import Message, MessageId, SubType

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``ack`` waits for a flush once this many acks (times the batch size) are buffered.
_MAX_BUFFERED_ACK_BATCHES = 10


class Consumer(Generic[T]):
    """Receives from a topic through a named subscription. Create with ``DanubeClient.subscribe``.

    Messages of all partitions are merged into one buffer of ``receiver_queue_size``
    messages, taken round-robin over the partitions; order is kept within a partition, and each
    partition is guaranteed its share of the buffer (see :mod:`danube_sdk.receive_queue`). ``ack`` buffers the offset and returns;
    buffered acks go out as one ``AckBatch`` per partition every ``ack_flush_interval_ms``
    or ``ack_batch_size`` acks, and on ``flush_acks``/``close``.
    """

    def __init__(
        self,
        conns: Connections,
        *,
        topic: str,
        subscription: str,
        name: str,
        partitions: list[str],
        opts: ConsumerOptions,
        client_opts: ClientOptions,
        decode: Callable[[bytes], Any] | None = None,
        reader: StartPosition | None = None,
    ) -> None:
        self.topic = topic
        self.subscription = subscription
        self.consumer_name = name
        self.partitions = list(partitions)
        self._opts = opts
        self._client_opts = client_opts
        self._queue = ReceiveQueue(opts.receiver_queue_size, partitions=len(partitions))
        self._parts = {
            p: TopicConsumer(
                conns,
                topic=p,
                name=name,
                subscription=subscription,
                opts=opts,
                client_opts=client_opts,
                queue=self._queue,
                decode=decode,
                reader=reader,
            )
            for p in partitions
        }
        self._acks = AckBuffer()
        self._ack_wake = LoopEvent()
        self._ack_full = LoopEvent()
        self._ack_task: asyncio.Task[None] | None = None
        self._chunk_task: asyncio.Task[None] | None = None
        self._closed: ClientClosed | None = None
        #: Called once closed (the client uses it to forget this consumer).
        self.on_closed: Callable[[Consumer[Any]], None] | None = None
        tracer = active_tracer()
        #: ``process`` spans of received messages that carry a sampled trace (None: not tracing).
        self._spans = ProcessSpans(tracer, subscription) if tracer is not None else None

    async def _start(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for part in self._parts.values():
                    tg.create_task(
                        retry_until(
                            part.subscribe,
                            timeout_s=self._client_opts.operation_timeout_s,
                            what=f"subscribing {self.subscription} to {part.topic}",
                        )
                    )
        except BaseExceptionGroup as eg:
            for part in self._parts.values():
                with contextlib.suppress(DanubeError):
                    await part.aclose(unsubscribe=False)
            raise first_error(eg) from None
        for part in self._parts.values():
            part.start()
        self._ack_task = asyncio.create_task(self._ack_loop(), name=f"danube-acks {self.topic}")
        self._chunk_task = asyncio.create_task(self._chunk_loop(), name=f"danube-chunks {self.topic}")

    # ------------------------------------------------------------------ receiving

    async def receive(self, timeout_s: float | None = None) -> Message[T]:
        """The next message; raises ClientTimeout (a ``Timeout`` and a ``TimeoutError``) after
        ``timeout_s`` (None: wait indefinitely).

        Raises ClientClosed once the consumer is closed, or the error that stopped it.
        """
        msg = self._queue.get_nowait()  # fast path: no timer when a message is buffered
        if msg is None:
            if timeout_s is None:
                msg = await self._queue.get()
            else:
                try:
                    async with asyncio.timeout(timeout_s):
                        msg = await self._queue.get()
                except TimeoutError:
                    raise ClientTimeout(f"no message received on {self.topic} within {timeout_s} s") from None
        if self._spans is not None:
            self._spans.received(msg)
        return cast("Message[T]", msg)

    async def receive_many(
        self, max_messages: int = 1000, timeout_s: float | None = None
    ) -> list[Message[T]]:
        """Between 1 and ``max_messages`` messages: whatever is buffered, waiting (up to
        ``timeout_s``) only when nothing is. The cheap way to consume at high rates."""
        if max_messages < 1:
            raise InvalidArgument(f"max_messages must be at least 1, got {max_messages}")
        first = await self.receive(timeout_s)
        rest = cast("list[Message[T]]", self._queue.take(max_messages - 1))
        if self._spans is not None:
            for msg in rest:
                self._spans.received(msg)
        return [first, *rest]

    def __aiter__(self) -> Consumer[T]:
        return self

    async def __anext__(self) -> Message[T]:
        try:
            msg = await self._queue.get()
        except ClientClosed:
            raise StopAsyncIteration from None
        if self._spans is not None:
            self._spans.received(msg)
        return cast("Message[T]", msg)

    # ------------------------------------------------------------------ acks

    async def ack(self, msg: Message[Any]) -> None:
        """Acknowledge one message (buffered; see the class doc)."""
        if self._closed is not None:
            raise self._closed
        topic = msg.topic
        if topic not in self._parts:
            raise InvalidArgument(f"message from {topic} does not belong to this consumer ({self.topic})")
        if self._spans is not None:
            self._spans.settled(topic, msg.offset, "ack", msg.batch_index)
        if isinstance(msg, PackedEntryMessage) and not msg.settle_in_pack():
            return  # the pack's offset is acknowledged with its last message
        chunks = msg.chunk_offsets
        if chunks:
            self._acks.add_many(topic, list(chunks))  # a large message: every chunk
            n = self._acks.count
        else:
            n = self._acks.add(topic, msg.offset)
        if n == 1:
            self._ack_wake.set()
        if n >= self._opts.ack_batch_size:
            self._ack_full.set()
            if n >= self._opts.ack_batch_size * _MAX_BUFFERED_ACK_BATCHES:
                await self.flush_acks()

    async def ack_cumulative(self, msg: Message[Any]) -> None:
        """Acknowledge ``msg`` and every earlier message of its partition, at once (not buffered).

        Exclusive and failover subscriptions only (the broker refuses it on shared ones). While
        the partition is reconnecting this waits, up to ``operation_timeout_s``.
        """
        if self._closed is not None:
            raise self._closed
        part = self._part_of(msg.topic)
        if self._opts.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            raise InvalidArgument(
                f"cumulative acks need an exclusive or failover subscription; {self.subscription!r} "
                f"is {self._opts.sub_type.name.lower()}: use ack() for each message"
            )
        upto = max(msg.chunk_offsets or (msg.offset,))  # a large message: up to its last chunk
        if isinstance(msg, PackedEntryMessage) and not msg.settle_in_pack(cumulative=True):
            upto = msg.offset - 1  # the rest of its pack is not acknowledged yet
            if upto < 0:
                return
        await retry_until(
            lambda: part.ack_batch([upto], cumulative=True),
            timeout_s=self._client_opts.operation_timeout_s,
            what=f"cumulative ack on {part.topic}",
        )
        part.packs.forget_up_to(upto)  # partly acked packs below: acknowledged whole now
        if self._spans is not None:
            self._spans.settled_up_to(msg.topic, msg.offset)

    async def seek(
        self,
        offset: int | None = None,
        *,
        publish_time_ms: int | None = None,
        message_id: MessageId | None = None,
    ) -> dict[str, int]:
        """Move the subscription (reliable topics); give exactly one target:

        - ``offset``: that offset of a non-partitioned topic;
        - ``message_id``: ``message_id.offset`` of the partition ``message_id.topic`` (offsets
          are per partition, so this is how to seek one partition of a partitioned topic);
        - ``publish_time_ms``: every partition, to its first message published at or after it.

        Returns ``{partition topic: offset it continues from}``. Messages buffered for the
        moved partitions are dropped; a few the broker sent before it processed the seek may
        still arrive. While a partition is reconnecting this waits, up to ``operation_timeout_s``.
        """
        if self._closed is not None:
            raise self._closed
        given = sum(x is not None for x in (offset, publish_time_ms, message_id))
        if given != 1:
            raise InvalidArgument("seek needs exactly one of offset, message_id or publish_time_ms")
        if offset is not None:
            if len(self._parts) > 1:
                raise InvalidArgument(
                    f"{self.topic} has {len(self._parts)} partitions and offsets are per partition: "
                    "use seek(message_id=MessageId(partition_topic, offset)) or seek(publish_time_ms=...)"
                )
            targets = {next(iter(self._parts)): offset}
        elif message_id is not None:
            self._part_of(message_id.topic)
            targets = {message_id.topic: message_id.offset}
        else:
            targets = {}
        for value in (*targets.values(), publish_time_ms):
            if value is not None and value < 0:
                raise InvalidArgument(f"seek target must be >= 0, got {value}")

        async def one(topic: str) -> tuple[str, int]:
            part = self._parts[topic]
            resumed = await retry_until(
                lambda: part.seek(offset=targets.get(topic), publish_time_ms=publish_time_ms),
                timeout_s=self._client_opts.operation_timeout_s,
                what=f"seek on {topic}",
            )
            return topic, resumed

        topics = list(targets) if targets else list(self._parts)
        return dict(await asyncio.gather(*(one(t) for t in topics)))

    def _part_of(self, topic: str) -> TopicConsumer:
        part = self._parts.get(topic)
        if part is None:
            raise InvalidArgument(f"{topic} is not a partition of this consumer's topic {self.topic}")
        return part

    async def nack(self, msg: Message[Any], *, delay_ms: int | None = None) -> None:
        """Ask for redelivery of one message (after ``delay_ms``, or the subscription's policy)."""
        if self._closed is not None:
            raise self._closed
        part = self._parts.get(msg.topic)
        if part is None:
            raise InvalidArgument(f"message from {msg.topic} does not belong to this consumer ({self.topic})")
        await part.nack(msg, delay_ms)
        if self._spans is not None:
            self._spans.settled(msg.topic, msg.offset, "nack", msg.batch_index)

    async def flush_acks(self) -> None:
        """Send every buffered ack now; failures are logged, the messages get redelivered."""
        await self._send_acks()

    async def _send_acks(self) -> bool:
        """Send the buffered acks; return False if some failed and were put back for retry."""
        groups = self._acks.take()
        if not groups:
            return True
        ok = True

        async def one(topic: str, offsets: list[int]) -> None:
            nonlocal ok
            part = self._parts.get(topic)
            if part is None:
                return  # a multi-topic consumer dropped the topic (deleted): nothing to ack
            try:
                await part.ack_batch(offsets)
            except DanubeError as err:
                if err.retryable and self._closed is None:
                    self._acks.add_many(topic, offsets)
                    ok = False
                else:
                    log.warning("dropping %d acks on %s: %s", len(offsets), topic, err)

        if len(groups) == 1:  # the common case (one topic): no gather, no task per group
            await one(*next(iter(groups.items())))
        else:
            await asyncio.gather(*(one(t, o) for t, o in groups.items()))
        return ok

    async def _ack_loop(self) -> None:
        interval_s = self._opts.ack_flush_interval_ms / 1000.0
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            if self._acks.count == 0:
                self._ack_wake.clear()
                await self._ack_wake.wait()
                continue
            if self._acks.count < self._opts.ack_batch_size and interval_s > 0:
                self._ack_full.clear()
                # A timer that sets the event, not asyncio.timeout: no cancellation raised
                # through the wait at every flush interval.
                timer = loop.call_later(interval_s, self._ack_full.set)
                try:
                    await self._ack_full.wait()
                finally:
                    timer.cancel()
            if await self._send_acks():
                failures = 0
            else:
                await asyncio.sleep(backoff_s(failures))
                failures += 1

    async def _chunk_loop(self) -> None:
        """Drop chunked messages whose chunks stopped arriving, and acknowledge their chunks
        (a producer that died mid-message never completes them: see danube_sdk.chunking)."""
        tick_s = min(1.0, self._opts.chunked_message_timeout_s / 4)
        while True:
            await asyncio.sleep(tick_s)
            now = time.monotonic()
            for topic, part in self._parts.items():
                if part.waiting_for_room:
                    part.chunks.touch(now)  # the application is behind: the chunks may be queued
                part.chunks.expire(now)
                dropped = part.chunks.take_dropped()
                if dropped:
                    self._acks.add_many(topic, dropped)
                    self._ack_wake.set()

    @property
    def chunked_dropped(self) -> int:
        """Chunked messages dropped incomplete so far (all partitions): timed out, evicted by
        ``max_pending_chunked_messages``, or with inconsistent chunks."""
        return sum(p.chunks.dropped for p in self._parts.values())

    # ------------------------------------------------------------------ closing

    async def close(self, *, unsubscribe: bool = False) -> None:
        """Send buffered acks and detach; with ``unsubscribe`` also delete the subscription."""
        await self._close(
            ClientClosed(f"consumer {self.consumer_name} on {self.topic} is closed"), unsubscribe
        )

    async def _take_over(self) -> None:
        """Closed because its client subscribed again under the same name (the new consumer
        takes its place at the broker; two live ones would take each other over in turns)."""
        await self._close(
            ClientClosed(
                f"consumer {self.consumer_name} on {self.topic} ({self.subscription}) was taken over: "
                "the client subscribed again with the same consumer name"
            ),
            False,
        )

    async def _close(self, why: ClientClosed, unsubscribe: bool) -> None:
        if self._closed is not None:
            return
        try:
            await self._send_acks()
        finally:
            self._closed = why
            exc = await cancel_and_wait(self._ack_task, self._chunk_task)
            if exc is not None:
                raise exc
            errors: list[DanubeError] = []
            for part in self._parts.values():
                try:
                    await part.aclose(unsubscribe=unsubscribe)
                except DanubeError as err:
                    errors.append(err)
            self._queue.clear()
            self._queue.fail(self._closed, replace=True)
            if self._spans is not None:
                self._spans.close()
            if self.on_closed is not None:
                self.on_closed(self)
            if errors:
                raise errors[0]

    async def unsubscribe(self) -> None:
        """Close and delete the subscription (its backlog and cursor)."""
        await self.close(unsubscribe=True)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def skipped(self) -> dict[str, list[tuple[int, int]]]:
        """Per partition, the offset ranges ``[start, end)`` the subscription skipped because
        they were gone (cut by retention before it read them, or lost with a broker's disk by an
        operator's recorded decision): messages this consumer will never receive. Also logged."""
        return {t: list(p.skipped) for t, p in self._parts.items() if p.skipped}

    async def __aenter__(self) -> Consumer[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
