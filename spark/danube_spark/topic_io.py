"""The SDK calls of the streaming source: which partitions a query reads, where they begin and
end, and reading one partition's offset range ``[start, end)`` with a Reader.

Nothing here knows Spark. Everything is asyncio; the Spark-facing modules run it on an event
loop of their own (:class:`LoopClient`), since Spark calls them from plain threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Literal, TypeVar

from danube_common.errors import DataLoss, Timeout
from danube_sdk import ClientTimeout, DanubeClient, StartPosition
from danube_sdk.multi_consumer import TopicPattern, namespace_topics
from danube_sdk.reader import Reader
from danube_sdk.sync._runner import LOOP, call
from danube_sdk.types import Message

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A read that got nothing for this long checks whether its offsets are gone (retention).
IDLE_CHECK_S = 1.0


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the process's one SDK loop thread (the blocking SDK's) and wait for it.

    The loop is taken once per process (driver, Python worker) and kept: grpc.aio's poller
    keeps serving the loops it has seen, so a loop made and closed per Spark task would leave
    it calling into closed loops. The thread is a daemon; it ends with the process.
    """
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = LOOP.acquire()
    return call(_loop, coro)


class LoopClient:
    """A DanubeClient on the process's SDK loop thread, driven from plain threads."""

    def __init__(self, service_url: str, *, token: str | None = None) -> None:
        self._service_url = service_url
        self._token = token
        self._closed = False
        self.client = self.run(self._make())

    async def _make(self) -> DanubeClient:
        return DanubeClient(self._service_url, token=self._token)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return run_async(coro)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.run(self.client.close())


# ---------------------------------------------------------------------- partitions and ends


async def partitions_of(client: DanubeClient, topics: Sequence[str], pattern: str | None) -> dict[str, str]:
    """``{partition topic: its topic}`` to read now: the listed topics (a missing one has no
    partitions yet), or the pattern's matches in its namespace."""
    out: dict[str, str] = {}
    names: list[str] = list(topics)
    if pattern is not None:
        pat = TopicPattern.parse(pattern)
        # The SDK's namespace listing (Discovery.NamespaceTopics), as its pattern consumer uses.
        listed = await namespace_topics(client._conns, pat.namespace)
        for name, of in listed:
            if pat.matches(name, of):
                if of:
                    out[name] = of
                else:
                    names.append(name)
    for topic in names:
        for p in await client.topic_partitions(topic):
            out[p] = topic
    return out


async def probe(
    client: DanubeClient, partitions: Sequence[str], where: Literal["earliest", "latest"]
) -> dict[str, int]:
    """Each partition's first kept offset (``earliest``) or next offset (``latest``): a reader
    attached there is told its start offset; it is closed at once (nothing is stored)."""

    async def one(p: str) -> tuple[str, int]:
        reader = await client.create_reader(p, start=where, receiver_queue_size=1)
        try:
            nxt = reader.next_offsets.get(p)
            if nxt is None:
                raise Timeout(f"reader on {p} attached without a start offset")
            return p, nxt
        finally:
            await reader.close()

    pairs = await asyncio.gather(*(one(p) for p in partitions))
    return dict(pairs)


# ---------------------------------------------------------------------- one partition's range


def covered(next_offset: int, skipped: Sequence[tuple[int, int]]) -> int:
    """How far offsets are accounted for: received below ``next_offset``, plus gone ranges that
    start at or below it (pure)."""
    reach = next_offset
    for start, end in sorted(skipped):
        if start <= reach:
            reach = max(reach, end)
    return reach


class RangeRead:
    """Reads offsets ``[start, end)`` of one partition topic (driven by :func:`read_range`).

    A Reader starts at ``start`` and is stopped once every offset below ``end`` was received or
    reported gone, and no chunked message that begins below ``end`` still misses chunks.
    Messages at ``end`` or later (the live tail) are dropped; so is a chunked message beginning
    before ``start`` (it belongs to the batch that holds its first chunk). Gone offsets
    (retention cut them before this read) raise :class:`DataLoss` with ``fail_on_data_loss``,
    else they are logged; either way :attr:`lost` lists them.
    """

    def __init__(
        self,
        client: DanubeClient,
        topic: str,
        start: int,
        end: int,
        *,
        fail_on_data_loss: bool,
        read_timeout_s: float,
        receiver_queue_size: int = 1000,
    ) -> None:
        self.client = client
        self.topic = topic
        self.start = start
        self.end = end
        self.fail_on_data_loss = fail_on_data_loss
        self.read_timeout_s = read_timeout_s
        self.receiver_queue_size = receiver_queue_size
        self.reader: Reader[Any] | None = None
        #: The offset after the last message taken from the reader (its chunks included).
        self._taken = start
        self.lost: list[tuple[int, int]] = []
        #: Gone offsets found by probing the topic's first offset (no frame reported them).
        self._probed_gone: list[tuple[int, int]] = []
        self.done = start >= end

    async def open(self) -> None:
        if not self.done:
            self.reader = await self.client.create_reader(
                self.topic,
                start=StartPosition.offset(self.start),
                receiver_queue_size=min(self.receiver_queue_size, max(1, self.end - self.start)),
            )

    async def close(self) -> None:
        if self.reader is not None:
            await self.reader.close()

    def _reach(self) -> int:
        # What was taken from the reader (not what it buffered), plus what is gone.
        assert self.reader is not None
        return covered(self._taken, [*self.reader.skipped.get(self.topic, []), *self._probed_gone])

    def _finished(self) -> bool:
        assert self.reader is not None
        if self._reach() < self.end:
            return False
        return not any(self.start <= o < self.end for o in self.reader.incomplete.get(self.topic, []))

    async def next_messages(self, max_messages: int) -> list[Message[Any]]:
        """Up to ``max_messages`` messages of the range, in offset order ([] once done)."""
        out: list[Message[Any]] = []
        if self.done or self.reader is None:
            self.done = True
            return out
        reader = self.reader
        last_progress = time.monotonic()
        reach = self._reach()
        while len(out) < max_messages:
            if self._finished():
                self.done = True
                break
            try:
                msg = await reader.receive(timeout_s=IDLE_CHECK_S)
            except ClientTimeout:
                if self._reach() > reach:
                    reach, last_progress = self._reach(), time.monotonic()
                elif await self._gone_below_end():
                    continue
                elif time.monotonic() - last_progress > self.read_timeout_s:
                    raise Timeout(
                        f"reading {self.topic} offsets {self.start}..{self.end - 1}: nothing arrived for "
                        f"{self.read_timeout_s:g} s after offset {reach - 1} (readTimeoutSeconds); is the "
                        "topic's broker reachable?"
                    ) from None
                continue
            last_progress = time.monotonic()
            self._taken = max(self._taken, msg.offset + 1, *(o + 1 for o in msg.chunk_offsets))
            if self.start <= msg.offset < self.end:
                out.append(msg)
        self._note_lost()
        return out

    async def _gone_below_end(self) -> bool:
        """Nothing arrives: are the missing offsets gone? (retention cut them and nothing was
        published after them, so no frame carries the skipped range). Counts them as lost."""
        reach = self._reach()
        first = (await probe(self.client, [self.topic], "earliest"))[self.topic]
        if first <= reach:
            return False
        self._probed_gone.append((reach, first))
        self._note_lost()
        return True

    def _note_lost(self) -> None:
        assert self.reader is not None
        gone = [
            (max(s, self.start), min(e, self.end))
            for s, e in [*self.reader.skipped.get(self.topic, []), *self._probed_gone]
            if s < self.end and e > self.start
        ]
        new = [r for r in gone if r not in self.lost]
        if not new:
            return
        self.lost.extend(new)
        what = ", ".join(f"{s}..{e - 1}" for s, e in new)
        text = (
            f"{self.topic}: offsets {what} are gone (cut by retention before this query read them); "
            "the streaming source does not hold retention back"
        )
        if self.fail_on_data_loss:
            raise DataLoss(text + ": set the option failOnDataLoss=false to skip them with a warning")
        log.warning("%s; skipped (failOnDataLoss=false)", text)


def read_range(
    make_client: Callable[[], LoopClient],
    topic: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool,
    read_timeout_s: float,
    receiver_queue_size: int,
    rows_per_step: int = 1000,
    to_rows: Callable[[list[Message[Any]]], T],
) -> Iterator[T]:
    """The messages of offsets ``[start, end)`` of ``topic``, streamed: ``to_rows`` of each step
    of up to ``rows_per_step`` messages; the client and reader are closed when the iterator ends
    or is closed."""
    lc = make_client()
    try:
        rr = RangeRead(
            lc.client,
            topic,
            start,
            end,
            fail_on_data_loss=fail_on_data_loss,
            read_timeout_s=read_timeout_s,
            receiver_queue_size=receiver_queue_size,
        )
        lc.run(rr.open())
        try:
            while not rr.done:
                msgs = lc.run(rr.next_messages(rows_per_step))
                if msgs:
                    yield to_rows(msgs)
        finally:
            with contextlib.suppress(Exception):
                lc.run(rr.close())
    finally:
        lc.close()
