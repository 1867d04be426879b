"""The broker's side of the WAL uploader: the Flush client, and ``cloud`` durability acks.

- :class:`UploaderClient` calls ``danube.uploader.v1.WalUploader.Flush`` on the co-located
  uploader (``uploader_addr``), with a deadline from config; failures are DanubeErrors.
- :class:`CloudAcks` (one per topic with ``durability: cloud``): a publish is acknowledged only
  once its batch is in object storage. After the local commit (fsync) the publish waits here;
  the topic's flusher gathers every waiting publish of an interval into one
  ``Flush(topic, up_to_offset=durable_offset)``, at most every ``cloud_flush_interval_ms``,
  and releases the publishes whose offsets are all below the returned
  ``uploaded_next_offset``. When the uploader or object storage fail or slow down, Flush
  fails or takes long: nothing is acked meanwhile, the producers' bounded in-flight windows
  fill up (back-pressure), and nothing is lost: the batches are in the local WAL and the next
  Flush retries.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

import grpc
import grpc.aio

from danube_common.errors import DanubeError, Unavailable, error_from_rpc
from danube_common.grpc_util import open_channel
from danube_common.pb import DanubeWalUploader_pb2 as up
from danube_common.pb import DanubeWalUploader_pb2_grpc as up_grpc

log = logging.getLogger(__name__)

#: ``flush(topic, up_to_offset) -> uploaded_next_offset`` (every offset below it is uploaded).
Flusher = Callable[[str, int], Awaitable[int]]

#: After consecutive failed flushes, wait up to this long between attempts.
_RETRY_MAX_S = 5.0
#: A failing flusher logs a WARNING at most this often.
_WARN_EVERY_S = 10.0


class UploaderClient:
    def __init__(
        self, addr: str, *, timeout_s: float, credentials: grpc.ChannelCredentials | None = None
    ) -> None:
        self.addr = addr
        self._timeout_s = timeout_s
        # TLS with ``credentials`` (the broker's own certificate: mTLS); None: plaintext.
        self._channel = open_channel(addr, credentials)
        self._stub = up_grpc.WalUploaderStub(self._channel)

    async def flush(self, topic: str, up_to_offset: int = 0) -> int:
        """Upload ``topic`` up to ``up_to_offset`` (exclusive; 0: everything on disk); return
        the topic's ``uploaded_next_offset`` once it is described in etcd."""
        try:
            resp: up.FlushResponse = await self._stub.Flush(
                up.FlushRequest(topic=topic, up_to_offset=up_to_offset), timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            err = error_from_rpc(exc)
            raise type(err)(f"WAL uploader {self.addr}: Flush of {topic} failed: {err.message}") from exc
        for progress in resp.topics:
            if progress.topic == topic:
                return int(progress.uploaded_next_offset)
        if resp.uploaded_next_offset:
            return int(resp.uploaded_next_offset)
        raise Unavailable(f"WAL uploader {self.addr}: its Flush answer does not mention topic {topic}")

    async def aclose(self) -> None:
        await self._channel.close()


class CloudAcks:
    """Publishes of one ``cloud`` topic waiting for object storage. Run :meth:`run` in a task
    owned by the topic; :meth:`close` fails whoever still waits."""

    def __init__(
        self,
        topic: str,
        flush: Flusher,
        durable_offset: Callable[[], int],
        *,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        uploaded_from: int = 0,
        on_advance: Callable[[], None] = lambda: None,
    ) -> None:
        self.topic = topic
        self._flush = flush
        self._durable = durable_offset
        self._interval_s = interval_s
        self._clock = clock
        #: Every offset below this is in object storage, as far as we know (``uploaded_from``:
        #: where this broker's stint of the log starts; what is below is history already).
        self.uploaded_next_offset = uploaded_from
        self._on_advance = on_advance
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._last_flush_at = -float("inf")
        self._closed: DanubeError | None = None
        self.flushes = 0
        self.failures = 0
        self.last_error = ""
        self._failing_since: float | None = None
        self._warned_at = -float("inf")

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, f in self._waiters if not f.done())

    async def wait_uploaded(self, end_offset: int) -> None:
        """Return once every offset below ``end_offset`` is in object storage."""
        if end_offset <= self.uploaded_next_offset:
            return
        if self._closed is not None:
            raise self._closed
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), fut))
        self._wake.set()
        await fut

    def advance(self, uploaded_next_offset: int) -> None:
        """The uploader says everything below ``uploaded_next_offset`` is uploaded."""
        if uploaded_next_offset > self.uploaded_next_offset:
            self.uploaded_next_offset = uploaded_next_offset
            self._on_advance()
        waiters = self._waiters
        while waiters and (waiters[0][0] <= self.uploaded_next_offset or waiters[0][2].done()):
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

    async def run(self) -> NoReturn:
        retry_s = self._interval_s
        while True:
            self.advance(self.uploaded_next_offset)  # drop cancelled waiters
            if not self._waiters:
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = self._last_flush_at + retry_s - self._clock()
            if delay > 0:
                await asyncio.sleep(delay)  # at most one Flush per interval: waiters gather
            up_to = self._durable()
            self._last_flush_at = self._clock()
            try:
                uploaded = await self._flush(self.topic, up_to)
            except DanubeError as exc:
                self._failed(exc)
                retry_s = min(retry_s * 2, max(_RETRY_MAX_S, self._interval_s))
                continue
            self.flushes += 1
            if self._failing_since is not None:
                log.info(
                    "topic %s: object storage confirms uploads again after %.1fs (uploaded up to offset %d)",
                    self.topic,
                    self._clock() - self._failing_since,
                    uploaded,
                )
                self._failing_since = None
            retry_s = self._interval_s
            self.advance(uploaded)

    def _failed(self, exc: DanubeError) -> None:
        self.failures += 1
        self.last_error = str(exc)
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "topic %s (durability cloud): %d publish(es) wait for object storage, Flush failed: %s; "
                "producers get no ack until it succeeds (retrying)",
                self.topic,
                self.waiting,
                exc,
            )

    def close(self, error: DanubeError) -> None:
        """Fail every waiting publish with ``error`` (the topic is closing); later waits too."""
        self._closed = error
        waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(type(error)(error.message))
