"""The broker's one maintenance loop for every reliable topic: cursor flushes and retention.

Per topic there is no timer and no task: a topic whose cursor moved is marked dirty; the loop
wakes, waits ``flush_interval_s`` to gather every change of the interval (as each topic's own
loop did before), and writes the cursors of every dirty topic in shared etcd transactions
(:mod:`~danube_broker.dispatch.reliable.cursor_batch`: each topic's writes fenced by its own
epoch, at most ``max_txn_ops`` operations per transaction). Then retention runs on the topics
written. Every ``retention_interval_s`` retention runs on every topic that has something it
could cut (time-based retention moves with the clock alone): the topics with a sealed segment,
or with two or more uploaded segments and a retention limit (object storage), known without
walking the others (a topic is added when it registers with one, when its log seals one and
when its retention changes, and dropped once retention leaves it none), so thousands of idle
topics with only their active segment cost the periodic sweep nothing.

A shared transaction lands whole or not at all. If it is refused (some topic's fence failed:
that topic moved on), each of its topics writes alone, through its own fenced path: the others
land, the fenced one is handled as before (it adopts a newer epoch of its own and writes again,
or stops writing cursors). An etcd error leaves every topic of the transaction dirty: written at
the next flush. Nothing of this weakens what a cursor means: a cursor in etcd never runs ahead of
what the subscription acknowledged, and a closing topic still writes its cursors itself, at once.

The loop starts with the first topic registered and is owned by this object (:meth:`aclose`);
a crash of it, or its task ending cancelled other than by :meth:`aclose` (a CancelledError
escaping a topic's retention), is reported through ``on_failure`` (the broker stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from danube_broker.dispatch.reliable.cursor_batch import MAX_TXN_OPS, CursorWrite, batches, combined
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError
from danube_common.metadata.store import MetadataStore

log = logging.getLogger(__name__)

#: Topics handled between two yields to the event loop in a retention sweep.
_SWEEP_SLICE = 64


class Maintained(Protocol):
    """What the loop needs of a reliable topic."""

    @property
    def name(self) -> str: ...

    async def begin_cursor_flush(self) -> CursorWrite[Maintained] | None:
        """The topic's changed cursors, with its flush lock held (None: nothing to write now)."""

    async def end_cursor_flush(self, write: CursorWrite[Maintained], outcome: bool | DanubeError) -> bool:
        """Finish a flush begun above and release the lock: ``True`` written; ``False`` the
        shared transaction was refused (write alone now); an error: etcd failed (retry later).
        Returns whether the cursors are now written."""

    def abort_cursor_flush(self, write: CursorWrite[Maintained]) -> None:
        """Release the lock of a flush that will not finish (cancelled): still dirty."""

    def retention_due(self) -> bool:
        """Whether :meth:`apply_retention` could cut anything (cheap: an idle topic with only its
        active segment answers False without a coroutine being made)."""

    async def apply_retention(self) -> None: ...


class Maintenance:
    def __init__(
        self,
        store: MetadataStore,
        *,
        flush_interval_s: float,
        retention_interval_s: float,
        on_failure: Callable[[str, BaseException], None],
        max_txn_ops: int = MAX_TXN_OPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._flush_interval_s = flush_interval_s
        self._retention_interval_s = retention_interval_s
        self._on_failure = on_failure
        self._max_txn_ops = max_txn_ops
        self._clock = clock
        self._topics: dict[str, Maintained] = {}
        #: Registered topics retention could cut something of (a sealed segment): the sweep's.
        self._retainable: dict[str, Maintained] = {}
        #: Topics whose cursors moved since their last flush (insertion order: oldest first).
        self._dirty: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Figures (tests, debugging): shared transactions, refused ones, cursor writes in them.
        self.shared_txns = 0
        self.refused_txns = 0
        self.shared_writes = 0

    @property
    def topics(self) -> int:
        return len(self._topics)

    @property
    def retainable(self) -> int:
        """Topics the periodic retention sweep walks (those with a sealed segment)."""
        return len(self._retainable)

    def register(self, topic: Maintained) -> None:
        self._topics[topic.name] = topic
        if topic.retention_due():
            self._retainable[topic.name] = topic
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="reliable-maintenance")
            self._task.add_done_callback(self._done)

    def unregister(self, topic: Maintained) -> None:
        if self._topics.get(topic.name) is topic:
            del self._topics[topic.name]
            self._dirty.pop(topic.name, None)
            self._retainable.pop(topic.name, None)

    def sealed(self, topic: Maintained) -> None:
        """``topic``'s log sealed a segment (or its retention changed): the periodic sweep looks
        at it from now on."""
        if self._topics.get(topic.name) is topic:
            self._retainable[topic.name] = topic

    def mark_dirty(self, topic: Maintained) -> None:
        if self._topics.get(topic.name) is topic:
            self._dirty[topic.name] = None
            self._wake.set()

    # ------------------------------------------------------------------ one round
    async def flush_dirty(self) -> list[Maintained]:
        """Write the cursors of every dirty topic; returns the topics whose cursors were written."""
        names = list(self._dirty)
        self._dirty.clear()
        writes: list[CursorWrite[Maintained]] = []
        for name in names:
            topic = self._topics.get(name)
            if topic is None:
                continue
            write = await topic.begin_cursor_flush()
            if write is not None:
                writes.append(write)
        written: list[Maintained] = []
        ended: set[int] = set()
        try:
            for batch in batches(writes, self._max_txn_ops):
                written += await self._write(batch, ended)
        finally:
            for w in writes:
                if id(w) not in ended:
                    w.owner.abort_cursor_flush(w)
        return written

    async def _write(self, batch: list[CursorWrite[Maintained]], ended: set[int]) -> list[Maintained]:
        if len(batch) == 1:  # the topic's own fenced path (it splits what exceeds a transaction)
            w = batch[0]
            ended.add(id(w))
            return [w.owner] if await w.owner.end_cursor_flush(w, False) else []
        compares, ops = combined(batch)
        outcome: bool | DanubeError
        try:
            res = await self._store.txn(compares, ops)
            outcome = res.succeeded
        except DanubeError as exc:
            log.warning("writing the cursors of %d topic(s) failed (%s); retrying", len(batch), exc)
            outcome = exc
        self.shared_txns += 1
        if outcome is True:
            self.shared_writes += len(ops)
        elif outcome is False:
            self.refused_txns += 1
            log.info(
                "a shared cursor transaction of %d topics was refused (a topic's ownership moved on); "
                "writing each topic alone",
                len(batch),
            )
        written = []
        for w in batch:
            ended.add(id(w))
            if await w.owner.end_cursor_flush(w, outcome):
                written.append(w.owner)
        return written

    async def sweep(self, topics: list[Maintained] | None = None) -> None:
        """Retention on ``topics`` (default: every registered topic with a sealed segment)."""
        todo = [(t.name, t) for t in topics] if topics is not None else list(self._retainable.items())
        for i, (name, topic) in enumerate(todo):
            if self._topics.get(name) is not topic:
                continue  # closed meanwhile
            if topic.retention_due():
                self._retainable[name] = topic
                try:
                    await topic.apply_retention()
                except DanubeError as exc:
                    log.warning("topic %s: retention check failed (%s); retrying later", name, exc)
            if not topic.retention_due() and self._retainable.get(name) is topic:
                del self._retainable[name]  # nothing sealed left: out of the periodic sweep
            if i % _SWEEP_SLICE == _SWEEP_SLICE - 1:
                await asyncio.sleep(0)

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        next_sweep = self._clock() + self._retention_interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_sweep - self._clock())):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake.clear()
                await asyncio.sleep(self._flush_interval_s)  # gather every cursor change of the interval
                written = await self.flush_dirty()
                await self.sweep(written)
            if self._clock() >= next_sweep:
                await self.sweep()
                next_sweep = self._clock() + self._retention_interval_s

    def _done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            if self._task is task:  # not by aclose: a CancelledError escaped from a topic's await
                self._on_failure(
                    "the reliable topics' maintenance loop",
                    RuntimeError("cancelled unexpectedly: cursors and retention would stop"),
                )
            return
        exc = task.exception()
        if exc is not None:
            self._on_failure("the reliable topics' maintenance loop", exc)

    async def aclose(self) -> None:
        """Stop the loop (the next ``register`` starts it again). Topics write their own cursors
        when they close; what is dirty here and not closed is written by the next loop."""
        task, self._task = self._task, None
        err = await cancel_and_wait(task)
        if err is not None:
            raise err
