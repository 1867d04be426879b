"""The producer users hold: routes messages over the partitions and bounds what is pending."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from danube_common.aio import LoopEvent, cancel_and_wait
from danube_common.compression import Compression, compress_if_smaller
from danube_common.errors import DanubeError, InvalidArgument, MessageTooLarge
from danube_sdk import delivery
from danube_sdk.batch import message_bytes
from danube_sdk.chunking import split
from danube_sdk.connection import Connections
from danube_sdk.errors import ClientClosed
from danube_sdk.options import ClientOptions, ProducerOptions
from danube_sdk.retry import retry_until
from danube_sdk.routing import PartitionRouter
from danube_sdk.streams import first_error
from danube_sdk.topic_producer import TopicProducer
from danube_sdk.types import MessageId

if TYPE_CHECKING:
    from danube_sdk.schema_registry import ProducerSchema

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``max_pending_bytes=0``: no byte bound.
_NO_BYTE_BOUND = 1 << 62


class Producer(Generic[T]):
    """Publishes to a topic (all its partitions). Create with ``DanubeClient.create_producer``.

    ``send_async`` appends the message to a batch and returns at once with a future of its
    :class:`MessageId`; it only waits when ``max_pending_messages`` are already sent but not
    acknowledged (back-pressure). ``send`` waits for the broker's acknowledgement.

    With a typed schema (``create_producer(schema=...)``) messages are values of type ``T``,
    encoded by the schema; without one they are payload bytes. Either way a producer with a
    schema stamps ``schema_id``/``schema_version`` (see :attr:`schema`) on every message.
    """

    def __init__(
        self,
        conns: Connections,
        *,
        topic: str,
        name: str,
        partitions: list[str],
        opts: ProducerOptions,
        client_opts: ClientOptions,
        schema: ProducerSchema | None = None,
        encode: Callable[[Any], bytes] | None = None,
    ) -> None:
        self.topic = topic
        self.producer_name = name
        #: The schema version this producer uses (subject, schema id, version), or None.
        self.schema = schema
        self._encode = encode
        self.partitions = list(partitions)
        self._opts = opts
        self._loop = asyncio.get_running_loop()
        self._pending = 0
        self._max_pending = opts.max_pending_messages
        self._pending_bytes = 0
        self._max_pending_bytes = opts.max_pending_bytes or _NO_BYTE_BOUND
        self._space = LoopEvent()
        self._space.set()
        self._closed: ClientClosed | None = None
        #: Whether the caller numbers the messages (``send_async(sequence_id=)``); None: no send yet.
        self._explicit_ids: bool | None = None
        self._router = PartitionRouter(len(partitions), opts.routing_mode)
        names = [name if p == topic else f"{name}-{i}" for i, p in enumerate(partitions)]
        self._parts = [
            TopicProducer(
                conns,
                topic=p,
                name=n,
                opts=opts,
                client_opts=client_opts,
                release=self._release,
                schema=schema,
            )
            for p, n in zip(partitions, names, strict=True)
        ]
        self._expiry: asyncio.Task[None] | None = None
        self._client_opts = client_opts
        #: Called once closed (the client uses it to forget this producer).
        self.on_closed: Callable[[Producer[Any]], None] | None = None

    async def _start(self) -> None:
        """Attach every partition (retrying retryable failures), then start sending."""
        try:
            async with asyncio.TaskGroup() as tg:
                for part in self._parts:
                    tg.create_task(
                        retry_until(
                            part.connect,
                            timeout_s=self._client_opts.operation_timeout_s,
                            what=f"creating producer {part.name} on {part.topic}",
                        )
                    )
        except BaseExceptionGroup as eg:
            await self._abort()
            raise first_error(eg) from None
        for part in self._parts:
            part.start()
        if self._opts.send_timeout_s > 0:
            self._expiry = asyncio.create_task(
                self._expire_loop(), name=f"danube-producer-expiry {self.topic}"
            )

    async def _abort(self) -> None:
        self._closed = ClientClosed(f"producer {self.producer_name} on {self.topic} failed to start")
        for part in self._parts:
            with contextlib.suppress(DanubeError):
                await part.aclose(self._closed)

    # ------------------------------------------------------------------ sending

    async def send_async(
        self,
        value: T,
        *,
        properties: dict[str, str] | None = None,
        key: str | None = None,
        deliver_after: float | timedelta | None = None,
        deliver_at: int | datetime | None = None,
        sequence_id: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message; return a future resolved with its id once the broker acks it.

        Awaits only while ``max_pending_messages`` messages are unacknowledged. Errors
        (MessageTooLarge, Timeout, ProducerBusy, ClientClosed ...) are set on the future; a
        value the producer's schema cannot encode raises ``InvalidPayload`` here, before
        anything is queued.

        Delayed delivery (reliable topics; shared and key-shared subscriptions): not before
        ``deliver_after`` seconds (or timedelta) from now, or not before ``deliver_at`` (epoch
        milliseconds, or an aware datetime). See :mod:`danube_sdk.delivery`.

        ``sequence_id`` (idempotent producers): the caller numbers the messages instead of the
        producer, e.g. from their position in a replayable input, so that re-sending the same
        messages with the same ids under the same ``producer_name`` (another process, a retry)
        stores each once: the broker drops a message whose id is not above the last one it
        stored for that producer name and partition. Ids must increase per partition (a key
        routes to one); a producer takes explicit ids for every message or for none; such a
        message is never split into chunks (over the size limit it fails with MessageTooLarge).
        Bad ids raise ``InvalidArgument`` here.
        """
        explicit = sequence_id is not None
        if self._explicit_ids is None:
            self._explicit_ids = explicit
        elif self._explicit_ids != explicit:
            raise InvalidArgument(
                f"producer {self.producer_name}: give sequence_id for every message or for none"
            )
        if explicit and not self._opts.enable_idempotence:
            raise InvalidArgument("sequence_id needs an idempotent producer (enable_idempotence=True)")
        due_ms = 0
        if deliver_after is not None or deliver_at is not None:
            due_ms = delivery.deliver_at_ms(
                deliver_after=deliver_after, deliver_at=deliver_at, now_ms=time.time_ns() // 1_000_000
            )
        payload = self._encode(value) if self._encode is not None else cast(bytes, value)
        codec = Compression.NONE  # compressed when its batch is sealed (danube_sdk.packs) ...
        size = message_bytes(payload, properties) if properties else len(payload)
        if self._pending >= self._max_pending or self._pending_bytes + size > self._max_pending_bytes:
            await self._wait_for_room(size)
        fut: asyncio.Future[MessageId] = self._loop.create_future()
        if self._closed is not None:
            fut.set_exception(self._closed)
            return fut
        part = self._parts[self._router.choose(key)]
        seq = 0
        if sequence_id is not None:
            seq = int(sequence_id)
            if seq <= part.last_explicit_id:
                raise InvalidArgument(
                    f"sequence_id {seq} is not above {part.last_explicit_id}, the last one this producer "
                    f"sent to {part.topic}: ids must increase per partition"
                )
        if part.fatal is not None:
            fut.set_exception(part.fatal)
            return fut
        if part.max_message_size and len(payload) > part.max_message_size and self._opts.compression:
            # ... unless it may fit only once compressed
            codec, payload = compress_if_smaller(self._opts.compression, payload)
            size = message_bytes(payload, properties)
        if part.max_message_size and len(payload) > part.max_message_size:
            if self._opts.enable_chunking and not seq:
                return await self._send_chunks(part, payload, codec, properties, key, fut, due_ms)
            fut.set_exception(
                MessageTooLarge(
                    f"message of {len(payload)} bytes exceeds the topic's limit of "
                    f"{part.max_message_size} bytes ({part.topic})"
                )
            )
            return fut
        self._pending += 1
        self._pending_bytes += size
        part.add(
            payload,
            properties,
            key,
            fut,
            time.time_ns() // 1_000_000,
            codec,
            deliver_at_ms=due_ms,
            sequence_id=seq,
        )
        return fut

    async def _send_chunks(
        self,
        part: TopicProducer,
        payload: bytes,
        codec: Compression,
        properties: dict[str, str] | None,
        key: str | None,
        fut: asyncio.Future[MessageId],
        due_ms: int = 0,
    ) -> asyncio.Future[MessageId]:
        """Send ``payload`` as chunks of at most the broker's limit, in order, on one partition;
        ``fut`` gets the first chunk's id once every chunk is acknowledged, or the first failure
        (chunks already stored are then dropped by consumers after their chunk timeout)."""
        pieces = split(payload, part.max_message_size)
        count = len(pieces)
        message_uuid = uuid.uuid4().hex
        futs: list[asyncio.Future[MessageId]] = []
        failed: DanubeError | None = None
        for index, piece in enumerate(pieces):
            size = message_bytes(piece, properties)
            if self._full(size):
                await self._wait_for_room(size)
            failed = self._closed or part.fatal
            if failed is not None:
                break
            f: asyncio.Future[MessageId] = self._loop.create_future()
            self._pending += 1
            self._pending_bytes += size
            now_ms = time.time_ns() // 1_000_000
            chunk = (message_uuid, index, count, len(payload))
            part.add(piece, properties, key, f, now_ms, codec, chunk, deliver_at_ms=due_ms)
            futs.append(f)

        def finish(_: object) -> None:
            if fut.done():
                return
            if any(f.cancelled() for f in futs):
                fut.cancel()
                return
            errors = [f.exception() for f in futs if f.exception() is not None]
            if failed is not None or errors:
                fut.set_exception(errors[0] if errors else failed)  # type: ignore[arg-type]
            else:
                fut.set_result(futs[0].result())

        if not futs:
            finish(None)
        else:
            asyncio.gather(*futs, return_exceptions=True).add_done_callback(finish)
        return fut

    async def send(
        self,
        value: T,
        *,
        properties: dict[str, str] | None = None,
        key: str | None = None,
        deliver_after: float | timedelta | None = None,
        deliver_at: int | datetime | None = None,
        sequence_id: int | None = None,
    ) -> MessageId:
        """Send one message and wait until the broker has acknowledged it (options as
        :meth:`send_async`)."""
        fut = await self.send_async(
            value,
            properties=properties,
            key=key,
            deliver_after=deliver_after,
            deliver_at=deliver_at,
            sequence_id=sequence_id,
        )
        return await fut

    async def send_many(
        self,
        payloads: Iterable[T],
        *,
        properties: dict[str, str] | None = None,
        key: str | None = None,
        deliver_after: float | timedelta | None = None,
        deliver_at: int | datetime | None = None,
    ) -> list[MessageId]:
        """Send many messages pipelined; return their ids in order once all are acknowledged.

        If any fails, the first failure is raised after all have completed.
        """
        futs = [
            await self.send_async(
                p, properties=properties, key=key, deliver_after=deliver_after, deliver_at=deliver_at
            )
            for p in payloads
        ]
        if not futs:
            return []
        await asyncio.wait(futs)
        ids: list[MessageId] = []
        first: BaseException | None = None
        for fut in futs:
            exc = fut.exception()
            if exc is not None:
                first = first or exc
            else:
                ids.append(fut.result())
        if first is not None:
            raise first
        return ids

    async def flush(self) -> None:
        """Send everything queued now and wait until all of it is acknowledged or failed."""
        waits: list[asyncio.Future[None]] = []
        for part in self._parts:
            part.seal_open()
            waits += part.unfinished()
        if waits:
            await asyncio.wait(waits)

    async def close(self) -> None:
        """Flush, then detach from the brokers. Later sends fail with ClientClosed."""
        await self._close(ClientClosed(f"producer {self.producer_name} on {self.topic} is closed"))

    async def _take_over(self) -> None:
        """Flushed and closed because its client created another producer of the same name on
        the same topic (one name is one producer at the broker, with one sequence of ids)."""
        await self._close(
            ClientClosed(
                f"producer {self.producer_name} on {self.topic} was taken over: the client created "
                "another producer with the same name"
            )
        )

    async def _close(self, why: ClientClosed) -> None:
        if self._closed is not None:
            return
        self._closed = why
        self._space.set()
        try:
            await self.flush()
        finally:
            exc = await cancel_and_wait(self._expiry)
            if exc is not None:
                raise exc
            for part in self._parts:
                await part.aclose(self._closed)
            if self.on_closed is not None:
                self.on_closed(self)

    @property
    def pending(self) -> int:
        """Messages sent but not yet acknowledged (or failed)."""
        return self._pending

    @property
    def pending_bytes(self) -> int:
        """Their payload and property bytes (what ``max_pending_bytes`` bounds)."""
        return self._pending_bytes

    @property
    def closed(self) -> bool:
        return self._closed is not None

    # ------------------------------------------------------------------ internals

    def _full(self, size: int) -> bool:
        """No room for a message of ``size`` bytes: ``max_pending_messages`` are pending, or
        it would take the pending bytes past ``max_pending_bytes`` (a message larger than that
        still goes, alone, once nothing else is pending)."""
        if self._pending >= self._max_pending:
            return True
        return bool(self._pending_bytes) and self._pending_bytes + size > self._max_pending_bytes

    async def _wait_for_room(self, size: int) -> None:
        while self._closed is None and self._full(size):
            self._space.clear()
            await self._space.wait()

    def _release(self, n: int, nbytes: int) -> None:
        self._pending -= n
        self._pending_bytes -= nbytes
        if self._pending < self._max_pending and self._pending_bytes < self._max_pending_bytes:
            self._space.set()

    async def _expire_loop(self) -> None:
        tick_s = min(1.0, max(0.05, self._opts.send_timeout_s / 10))
        while True:
            await asyncio.sleep(tick_s)
            now = self._loop.time()
            for part in self._parts:
                part.expire(now)

    async def __aenter__(self) -> Producer[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
