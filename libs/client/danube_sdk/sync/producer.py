"""The blocking producer: ``send`` (waits for the ack), ``send_async`` (a concurrent future)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from danube_sdk.errors import ClientClosed
from danube_sdk.producer import Producer as AsyncProducer
from danube_sdk.sync._runner import call, on_loop_thread, refuse_on_loop_thread
from danube_sdk.types import MessageId

if TYPE_CHECKING:
    from danube_sdk.schema_registry import ProducerSchema

T = TypeVar("T")

#: Messages handed to ``send_async`` and not yet passed to the asyncio producer, at most (the
#: calling threads block beyond it; the asyncio producer's ``max_pending_messages`` and
#: ``max_pending_bytes`` follow).
DEFAULT_MAX_QUEUED = 10_000

_Item = tuple[Any, "dict[str, str] | None", "str | None", "concurrent.futures.Future[Any]"]
#: The value of a flush barrier in the queue (not a message).
_BARRIER = object()


class Producer(Generic[T]):
    """Publishes to a topic from any thread. Create with ``danube_sdk.sync.DanubeClient.create_producer``.

    Messages from all threads go through one queue to one task on the SDK's loop, which hands
    them to the asyncio producer in the order they were queued: the messages one thread sends
    keep their order. ``send_async`` blocks only while ``max_queued`` messages wait to be handed
    over (back-pressure); the asyncio producer then applies its own ``max_pending_messages`` and
    ``max_pending_bytes``.
    """

    def __init__(
        self,
        inner: AsyncProducer[T],
        loop: asyncio.AbstractEventLoop,
        *,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        self._inner = inner
        self._loop = loop
        self._inbox: deque[_Item] = deque()
        self._lock = threading.Lock()
        self._room = threading.Semaphore(max(1, max_queued))
        self._wake_pending = False
        self._closed = False
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._pump: asyncio.Task[None] | None = None
        #: Flushes under way (each waits for the acks of what was handed over before it).
        self._flushes: set[asyncio.Task[None]] = set()

    async def _start(self) -> None:
        self._wake = asyncio.Event()
        self._pump = asyncio.create_task(self._run(), name=f"danube-sync-producer {self.topic}")

    # ------------------------------------------------------------------ sending

    def send_async(
        self, value: T, *, properties: dict[str, str] | None = None, key: str | None = None
    ) -> concurrent.futures.Future[MessageId]:
        """Queue one message; the future resolves with its :class:`MessageId` once acknowledged,
        or with the error (the same classes as the asyncio SDK). Blocks while ``max_queued``
        messages are waiting. Cancelling the future before the message is handed over drops it."""
        fut: concurrent.futures.Future[MessageId] = concurrent.futures.Future()
        self._queue((value, properties, key, fut))
        return fut

    def _queue(self, item: _Item) -> None:
        if self._closed:
            raise ClientClosed(f"producer {self.producer_name} on {self.topic} is closed")
        if not self._room.acquire(blocking=not on_loop_thread(self._loop)):
            refuse_on_loop_thread(self._loop)  # waiting for room there would block the loop that makes it
        with self._lock:
            if self._closed:
                self._room.release()
                raise ClientClosed(f"producer {self.producer_name} on {self.topic} is closed")
            self._inbox.append(item)
            wake = not self._wake_pending
            self._wake_pending = True
        if wake:
            self._loop.call_soon_threadsafe(self._set_wake)

    def send(
        self, value: T, *, properties: dict[str, str] | None = None, key: str | None = None
    ) -> MessageId:
        """Send one message and wait for the broker's acknowledgement; return its id."""
        refuse_on_loop_thread(self._loop)
        return self.send_async(value, properties=properties, key=key).result()

    def send_many(
        self, values: Iterable[T], *, properties: dict[str, str] | None = None, key: str | None = None
    ) -> list[MessageId]:
        """Send all, pipelined; their ids in order once all are acknowledged (the first failure
        is raised after all have finished)."""
        refuse_on_loop_thread(self._loop)
        futs = [self.send_async(v, properties=properties, key=key) for v in values]
        concurrent.futures.wait(futs)
        return [f.result() for f in futs]

    def flush(self) -> None:
        """Wait until everything queued so far (from any thread) is acknowledged or failed."""
        refuse_on_loop_thread(self._loop)
        barrier: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue((_BARRIER, None, None, barrier))
        barrier.result()

    def close(self) -> None:
        """Hand over what is queued, flush, detach. Later sends raise ClientClosed. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        call(self._loop, self._aclose())

    # ------------------------------------------------------------------ the loop's side

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _take(self) -> list[_Item]:
        """Everything queued now, in order ([] when nothing: the next send wakes the pump)."""
        with self._lock:
            inbox = self._inbox
            if not inbox:
                self._wake_pending = False
                return []
            items = list(inbox)
            inbox.clear()
        self._room.release(len(items))
        return items

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while items := self._take():
                for item in items:
                    await self._hand_over(item)
            if self._stopping:
                return

    async def _hand_over(self, item: _Item) -> None:
        value, properties, key, fut = item
        if not fut.set_running_or_notify_cancel():
            return  # cancelled by its caller while queued
        if value is _BARRIER:
            task = asyncio.create_task(self._flush(fut))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
            return
        try:
            afut = await self._inner.send_async(value, properties=properties, key=key)
        except Exception as exc:  # e.g. InvalidPayload from the schema
            fut.set_exception(exc)
            return
        afut.add_done_callback(lambda f: _settle(fut, f))

    async def _flush(self, fut: concurrent.futures.Future[Any]) -> None:
        try:
            await self._inner.flush()
        except asyncio.CancelledError:
            fut.set_exception(ClientClosed("the flush was cancelled (its client closed)"))
            raise
        except Exception as exc:
            fut.set_exception(exc)
            return
        fut.set_result(None)

    async def _aclose(self) -> None:
        self._stopping = True
        self._set_wake()
        if self._pump is not None:
            await self._pump  # hands over everything queued before close
        await self._inner.close()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    # ------------------------------------------------------------------ views

    @property
    def topic(self) -> str:
        return self._inner.topic

    @property
    def producer_name(self) -> str:
        return self._inner.producer_name

    @property
    def partitions(self) -> list[str]:
        return self._inner.partitions

    @property
    def schema(self) -> ProducerSchema | None:
        return self._inner.schema

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Producer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(fut: concurrent.futures.Future[MessageId], afut: asyncio.Future[MessageId]) -> None:
    if afut.cancelled():
        fut.set_exception(ClientClosed("the send was cancelled (its producer or client closed)"))
    elif (exc := afut.exception()) is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(afut.result())
