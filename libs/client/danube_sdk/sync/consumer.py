"""The blocking consumer and reader: ``receive``, ``ack``, iteration, from any thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from danube_sdk.consumer import Consumer as AsyncConsumer
from danube_sdk.errors import ClientClosed
from danube_sdk.reader import Reader as AsyncReader
from danube_sdk.sync._runner import call
from danube_sdk.types import Message, MessageId

T = TypeVar("T")


class Consumer(Generic[T]):
    """Receives through a subscription. Create with ``danube_sdk.sync.DanubeClient.subscribe``.

    Every method may be called from any thread; each is one call into the SDK's loop. Many
    threads receiving from one consumer share its messages (each message goes to one of them).
    Iterating (``for msg in consumer``) ends when the consumer is closed.
    """

    def __init__(self, inner: AsyncConsumer[T], loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop

    def receive(self, timeout_s: float | None = None) -> Message[T]:
        """The next message; ClientTimeout (a TimeoutError) after ``timeout_s``; ClientClosed
        once closed (or the error that stopped the consumer)."""
        return call(self._loop, self._inner.receive(timeout_s))

    def receive_many(self, max_messages: int = 1000, timeout_s: float | None = None) -> list[Message[T]]:
        """Between 1 and ``max_messages`` messages (what is buffered; waits only for the first)."""
        return call(self._loop, self._inner.receive_many(max_messages, timeout_s))

    def __iter__(self) -> Iterator[Message[T]]:
        while True:
            try:
                yield self.receive()
            except ClientClosed:
                return

    def ack(self, msg: Message[Any]) -> None:
        """Acknowledge (buffered, as in the asyncio SDK)."""
        call(self._loop, self._inner.ack(msg))

    def ack_cumulative(self, msg: Message[Any]) -> None:
        call(self._loop, self._inner.ack_cumulative(msg))

    def nack(self, msg: Message[Any], *, delay_ms: int | None = None) -> None:
        call(self._loop, self._inner.nack(msg, delay_ms=delay_ms))

    def seek(
        self,
        offset: int | None = None,
        *,
        publish_time_ms: int | None = None,
        message_id: MessageId | None = None,
    ) -> dict[str, int]:
        return call(
            self._loop, self._inner.seek(offset, publish_time_ms=publish_time_ms, message_id=message_id)
        )

    def flush_acks(self) -> None:
        call(self._loop, self._inner.flush_acks())

    def close(self, *, unsubscribe: bool = False) -> None:
        """Send buffered acks and detach (``unsubscribe``: also delete the subscription).
        Threads waiting in ``receive`` get ClientClosed."""
        if self._loop.is_closed():
            return
        call(self._loop, self._inner.close(unsubscribe=unsubscribe))

    def unsubscribe(self) -> None:
        self.close(unsubscribe=True)

    @property
    def topic(self) -> str:
        return self._inner.topic

    @property
    def subscription(self) -> str:
        return self._inner.subscription

    @property
    def consumer_name(self) -> str:
        return self._inner.consumer_name

    @property
    def skipped(self) -> dict[str, list[tuple[int, int]]]:
        return self._inner.skipped

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def __enter__(self) -> Consumer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reader(Generic[T]):
    """Reads a reliable topic from a start position, without a durable subscription. Create with
    ``danube_sdk.sync.DanubeClient.create_reader`` (see :mod:`danube_sdk.reader`)."""

    def __init__(self, inner: AsyncReader[T], loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop

    def receive(self, timeout_s: float | None = None) -> Message[T]:
        """The next message; ClientTimeout after ``timeout_s`` (None: wait indefinitely)."""
        return call(self._loop, self._inner.receive(timeout_s))

    def __iter__(self) -> Iterator[Message[T]]:
        while True:
            try:
                yield self.receive()
            except ClientClosed:
                return

    def close(self) -> None:
        if self._loop.is_closed():
            return
        call(self._loop, self._inner.close())

    @property
    def topic(self) -> str:
        return self._inner.topic

    @property
    def reader_name(self) -> str:
        return self._inner.reader_name

    @property
    def read_compacted(self) -> bool:
        return self._inner.read_compacted

    @property
    def next_offsets(self) -> dict[str, int | None]:
        return self._inner.next_offsets

    @property
    def skipped(self) -> dict[str, list[tuple[int, int]]]:
        return self._inner.skipped

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def __enter__(self) -> Reader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
