"""The blocking client: the asyncio ``DanubeClient`` run on the SDK's background loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from danube_sdk.client import DanubeClient as AsyncClient
from danube_sdk.errors import ClientClosed
from danube_sdk.start_position import StartPosition
from danube_sdk.sync._runner import LOOP, OPEN_CLIENTS, call
from danube_sdk.sync.consumer import Consumer, Reader
from danube_sdk.sync.producer import DEFAULT_MAX_QUEUED, Producer


class DanubeClient:
    """A blocking client: the same names and options as :class:`danube_sdk.DanubeClient`.

    ``DanubeClient(service_url, **options)`` takes the asyncio client's keyword options
    (``rpc_timeout_s``, ``tls``, ``token`` ...). Every call may be made from any thread. The
    first client starts the SDK's loop thread (a daemon); closing the last one stops it. A
    client still open at interpreter exit is closed then (its producers flushed). Errors are
    the asyncio SDK's classes (:mod:`danube_sdk.errors`).
    """

    def __init__(self, service_url: str, **options: Any) -> None:
        self.service_url = service_url
        self._loop = LOOP.acquire()
        try:
            self._client: AsyncClient = call(self._loop, _make_client(service_url, options))
        except BaseException:
            LOOP.release()
            raise
        self._lock = threading.Lock()
        self._closed = False
        self._producers: list[Producer[Any]] = []
        OPEN_CLIENTS.add(self)

    def create_producer(
        self, topic: str, *, max_queued: int = DEFAULT_MAX_QUEUED, **options: Any
    ) -> Producer[Any]:
        """A producer (options: those of the asyncio ``create_producer``). ``max_queued``: how
        many messages ``send_async`` lets wait for the SDK's loop before it blocks the caller."""
        self._check_open()
        producer: Producer[Any] = call(self._loop, self._create_producer(topic, max_queued, options))
        with self._lock:
            self._producers = [p for p in self._producers if not p.closed] + [producer]
        return producer

    async def _create_producer(self, topic: str, max_queued: int, options: dict[str, Any]) -> Producer[Any]:
        inner = await self._client.create_producer(topic, **options)
        producer: Producer[Any] = Producer(inner, self._loop, max_queued=max_queued)
        await producer._start()
        return producer

    def subscribe(self, topic: str, *, subscription: str, **options: Any) -> Consumer[Any]:
        """A consumer (options: those of the asyncio ``subscribe``)."""
        self._check_open()
        inner = call(self._loop, self._client.subscribe(topic, subscription=subscription, **options))
        return Consumer(inner, self._loop)

    def subscribe_many(
        self,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | None = None,
        subscription: str,
        **options: Any,
    ) -> Consumer[Any]:
        """One consumer of many topics: a list, or a namespace pattern followed as topics come
        and go (options: those of the asyncio ``subscribe_many``)."""
        self._check_open()
        inner = call(
            self._loop,
            self._client.subscribe_many(topics, pattern=pattern, subscription=subscription, **options),
        )
        return Consumer(inner, self._loop)

    def create_reader(
        self,
        topic: str,
        *,
        start: StartPosition | str | int | datetime = StartPosition.LATEST,
        **options: Any,
    ) -> Reader[Any]:
        """A reader of a reliable topic (options: those of the asyncio ``create_reader``)."""
        self._check_open()
        inner = call(self._loop, self._client.create_reader(topic, start=start, **options))
        return Reader(inner, self._loop)

    def topic_partitions(self, topic: str) -> list[str]:
        self._check_open()
        return call(self._loop, self._client.topic_partitions(topic))

    def lookup_topic(self, topic: str) -> str:
        self._check_open()
        return call(self._loop, self._client.lookup_topic(topic))

    def close(self) -> None:
        """Close every producer (handing over and flushing what was sent), consumer and reader
        of this client, then its channels. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producers, self._producers = self._producers, []
        OPEN_CLIENTS.discard(self)
        try:
            for producer in producers:
                producer.close()
            call(self._loop, self._client.close())
        finally:
            LOOP.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the client is closed")

    def __enter__(self) -> DanubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_client(service_url: str, options: dict[str, Any]) -> AsyncClient:
    """Made on the loop, so everything it creates belongs to that loop."""
    await asyncio.sleep(0)
    return AsyncClient(service_url, **options)
