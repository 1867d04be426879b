"""Reader: reads a reliable topic from a start position, without a durable subscription.

A reader is a consumer of a *non-durable* exclusive subscription (``ConsumerRequest.reader``):
the owning broker keeps it in memory only (nothing in etcd, no hold on retention, no drain on
a move) and drops it with the reader. The reader acknowledges each message as the application
receives it (buffered, as ``Consumer.ack``), only so that the broker's delivery window moves on.

Each partition's consumer remembers the next offset it has not received. When it re-attaches
(stream broken, topic moved to another broker) it asks the broker to start there, and drops
anything below it that still arrives: the application sees every message once, in order per
partition, with no gap, unless the topic no longer keeps those offsets (retention cut them, or
a move without object storage left them on the old broker); those are reported in
:attr:`Reader.skipped`, as for a consumer.

A reader created with ``read_compacted=True`` reads the topic's compacted view: below the
compaction horizon only the newest message of each routing key arrives (offsets jump over the
rest), then every message from the horizon on. The flag is sent on
every (re)attach, and a re-attach asks for the offset after the last one received, which is
right whatever the gaps before it.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from danube_sdk.consumer import Consumer
from danube_sdk.errors import ClientClosed
from danube_sdk.types import Message

T = TypeVar("T")


class Reader(Generic[T]):
    """Create with ``DanubeClient.create_reader``. ``receive``, ``async for``, ``close``."""

    def __init__(self, consumer: Consumer[T]) -> None:
        self._consumer = consumer
        self.topic = consumer.topic
        #: The reader's name (its non-durable subscription's name at the broker).
        self.reader_name = consumer.subscription
        #: Whether the reader reads the topic's compacted view.
        self.read_compacted = consumer._opts.read_compacted

    async def receive(self, timeout_s: float | None = None) -> Message[T]:
        """The next message; ClientTimeout after ``timeout_s`` (None: wait indefinitely)."""
        msg = await self._consumer.receive(timeout_s)
        await self._consumer.ack(msg)
        return msg

    def __aiter__(self) -> Reader[T]:
        return self

    async def __anext__(self) -> Message[T]:
        try:
            return await self.receive()
        except ClientClosed:
            raise StopAsyncIteration from None

    @property
    def next_offsets(self) -> dict[str, int | None]:
        """Per partition, the next offset the reader has not received yet (None: not attached
        yet). Buffered messages count as received."""
        return {t: p.reader_next for t, p in self._consumer._parts.items()}

    @property
    def skipped(self) -> dict[str, list[tuple[int, int]]]:
        """Per partition, offset ranges ``[start, end)`` the reader passed because the topic no
        longer kept them."""
        return self._consumer.skipped

    @property
    def incomplete(self) -> dict[str, list[int]]:
        """Per partition, the offsets at which chunked messages start that are still missing
        chunks (received: the first chunk, not yet all of them). A reader that must stop at an
        offset can wait for these to complete."""
        return {t: p.chunks.first_offsets() for t, p in self._consumer._parts.items()}

    @property
    def closed(self) -> bool:
        return self._consumer.closed

    async def close(self) -> None:
        """Detach; the broker forgets the reader at once. Later calls raise ClientClosed."""
        await self._consumer.close()

    async def __aenter__(self) -> Reader[T]:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
