"""The old owner's side of a topic move: seal, drain, hand over (or keep the topic).

A move starts when the load manager marks our assignment ``{"moving_to": B}`` (a fenced
transaction that also bumps the owner key's epoch). Then, here:

1. **Seal**: producers are detached with TOPIC_NOT_OWNED ("moving"); new producers are refused
   the same way. Their clients look the topic up again; Discovery holds that lookup until the
   move is over and answers with the new owner.
2. **Drain** (reliable topics): wait until every batch in the log is durable and every
   subscription has acknowledged everything up to the log's end. Consumers stay attached and
   keep receiving, so nothing stored here is left behind. Non-reliable topics skip this (their
   queued messages are at-most-once and dropped with the topic).
   **With object storage and a WAL uploader** there is no drain: once every batch is durable,
   ``Flush(topic)`` puts the whole log into object storage, and the new owner's subscriptions
   read what they have not acknowledged from there (``TieredLog``). A flush that does not
   succeed within ``move_timeout_s`` abandons the move like a drain that does not finish.
3. **Hand over**: unload the topic (consumers get TOPIC_NOT_OWNED and follow), wait until it is
   closed (cursors written under the move's epoch, log closed), then one transaction fenced on
   that epoch makes B the owner, moves the assignment keys and records where the log ends
   (``storage/{topic}/state``), so B's log continues at the same offset.

If the drain does not finish within ``move_timeout_s`` (e.g. a subscription with a backlog and
no consumer), the move is **abandoned**: producers are accepted again and a transaction fenced on
the move's epoch puts the ownership back as it was. Nothing acknowledged is lost either way.

A crash at any step leaves the owner key saying ``moving_to``: the load manager sees the old
owner unregistered (its lease expires) and re-places the topic like any dead broker's topic.
A restart of the same broker finds the mark in its assignments and abandons the move at once.

Without object storage the drain is what keeps a reliable move lossless; with it, the flush
is.
"""

from __future__ import annotations

import asyncio
import logging

from danube_broker import ownership_spans
from danube_broker.cloud import UploaderClient
from danube_broker.metrics import BrokerEvents
from danube_broker.reader import reader_attached
from danube_broker.registry import BrokerRegistry
from danube_broker.tiering import Tiering
from danube_broker.topic import Topic, not_owned
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError
from danube_common.ownership import LogClose
from danube_common.records import Ownership
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: How often a draining move re-checks the subscriptions' acks.
_DRAIN_POLL_S = 0.05
#: First and longest pause between hand-over flush attempts.
_FLUSH_RETRY_FIRST_S = 0.1
_FLUSH_RETRY_MAX_S = 2.0


def drained(topic: Topic) -> bool:
    """Everything in the topic's log is durable and acknowledged by every subscription."""
    rt = topic.reliable
    if rt is None:
        return True
    if rt.log.durable_offset < rt.log.next_offset:
        return False
    return all(
        sub.engine is None
        or sub.engine.backlog() == 0
        or (sub.non_durable and not reader_attached(sub))  # a reader without a stream
        for sub in topic.subscriptions.values()
    )


class TopicMover:
    def __init__(
        self,
        registry: BrokerRegistry,
        resources: Resources,
        *,
        move_timeout_s: float,
        tiering: Tiering | None = None,
        events: BrokerEvents | None = None,
    ) -> None:
        self._reg = registry
        self._events = events
        self._res = resources
        self._timeout_s = move_timeout_s
        self._tiering = tiering
        self._moves: dict[str, asyncio.Task[None]] = {}
        #: Outcomes, for tests and stats: topic -> "handed over" | "abandoned" | "lost" | "failed".
        self.outcomes: dict[str, str] = {}

    @property
    def in_progress(self) -> list[str]:
        return list(self._moves)

    def on_move(self, topic: TopicName, own: Ownership, *, traceparent: str = "") -> None:
        """Our assignment of ``topic`` was marked ``moving_to`` at epoch ``own.epoch``;
        ``traceparent``: the context the mark carries (the hand-over is a span of that trace)."""
        name = str(topic)
        if name in self._moves:
            return
        task = asyncio.create_task(self._move(topic, own, traceparent), name=f"move-{name}")
        self._moves[name] = task
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        name = task.get_name().removeprefix("move-")
        if self._moves.get(name) is task:
            del self._moves[name]
        if not task.cancelled() and task.exception() is not None:
            self._reg.tasks.report_failure(f"the move of topic {name}", task.exception())  # type: ignore[arg-type]

    async def abandon_at_start(self, topic: TopicName, own: Ownership) -> None:
        """A mark found when (re)starting: we hold nothing of the topic yet, so keep it."""
        if await self._res.abort_move(own) is not None:
            log.warning(
                "topic %s: a move to %s was interrupted by a restart; kept here", topic, own.moving_to
            )

    async def _move(self, topic: TopicName, own: Ownership, traceparent: str = "") -> None:
        name = str(topic)
        with ownership_spans.handing_over(name, own, traceparent) as span:
            next_offset = await self._hand_over(topic, own)
            ownership_spans.annotate(
                span, {"danube.move.outcome": self.outcomes.get(name), "danube.log.next_offset": next_offset}
            )

    async def _hand_over(self, topic: TopicName, own: Ownership) -> int | None:
        """The move (see the module docstring); returns where the topic's log ends (reliable
        topics that got that far), for the trace."""
        name = str(topic)
        loop = asyncio.get_running_loop()
        start = loop.time()
        t = self._reg.topics.get(name)
        next_offset: int | None = None
        uploaded: int | None = None
        close: LogClose | None = None
        try:
            if t is not None:
                t.epoch = max(t.epoch, own.epoch)
                self._reg.seal(t, not_owned(name, f"moving to broker {own.moving_to}"))
                ownership_spans.event("sealed", reliable=t.is_reliable)
                deadline = start + self._timeout_s
                # With object storage and an uploader, a flush replaces the drain.
                flusher = self._flusher() if t.is_reliable else None
                if flusher is not None:
                    uploaded = await self._flush(t, flusher, deadline)
                    if uploaded is None:
                        await self._abandon(t, own, why="object storage did not confirm the log's upload")
                        return None
                    ownership_spans.event("flushed to object storage", uploaded_next_offset=uploaded)
                elif t.is_reliable:
                    if not await self._drain(t, deadline):
                        await self._abandon(t, own)
                        return None
                    ownership_spans.event("drained")
                reliable = t.reliable
                if reliable is not None:
                    next_offset = reliable.log.next_offset
                self._reg.unload(name, not_owned(name, f"moved to broker {own.moving_to}"))
                await self._reg.tasks.before_open(name)
                ownership_spans.event("unloaded and closed")
                if reliable is not None:
                    next_offset = reliable.local.next_offset  # closed: what the log really holds
                    if flusher is not None and uploaded is not None and next_offset > uploaded:
                        await self._flush_rest(name, flusher, next_offset)
                    close = reliable.close_txn(next_offset, "hand_over")
            handed = await self._res.hand_over(own, close=close)
        except DanubeError as exc:
            log.error(
                "topic %s: the move to %s failed (%s); the load manager will re-place it",
                name,
                own.moving_to,
                exc,
            )
            self._outcome(name, "failed")
            return next_offset
        if handed:
            self._outcome(name, "handed over")
            log.info(
                "topic %s handed over to broker %s in %.0f ms%s",
                name,
                own.moving_to,
                (loop.time() - start) * 1000,
                f" (log ends at offset {next_offset})" if next_offset is not None else "",
            )
        else:
            self._outcome(name, "lost")
            log.warning(
                "topic %s: ownership changed during its move to %s; not handed over", name, own.moving_to
            )
        return next_offset

    def _outcome(self, topic: str, outcome: str) -> None:
        self.outcomes[topic] = outcome
        if self._events is not None:
            self._events.moved("out", outcome.replace(" ", "_"))

    async def _drain(self, t: Topic, deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        while not drained(t):
            if loop.time() >= deadline or t.closed:
                return False
            await asyncio.sleep(_DRAIN_POLL_S)
        return True

    def _flusher(self) -> UploaderClient | None:
        tiering = self._tiering
        return tiering.uploader if tiering is not None and tiering.skip_drain else None

    async def _flush(self, t: Topic, uploader: UploaderClient, deadline: float) -> int | None:
        """Once everything appended is durable, have the uploader put the whole log into object
        storage (retrying until ``deadline``); return the uploaded end, None if it never got there."""
        loop = asyncio.get_running_loop()
        pause = _FLUSH_RETRY_FIRST_S
        while not t.closed:
            rt = t.reliable
            if rt is None:
                return None
            end = rt.log.next_offset
            if rt.log.durable_offset >= end:
                try:
                    uploaded = await asyncio.wait_for(uploader.flush(t.name, end), deadline - loop.time())
                except (DanubeError, TimeoutError) as exc:
                    log.warning(
                        "topic %s: hand-over flush to object storage failed (%s); retrying", t.name, exc
                    )
                else:
                    if uploaded >= end:
                        return uploaded
                    log.warning(
                        "topic %s: object storage holds offsets up to %d of %d; flushing again",
                        t.name,
                        uploaded,
                        end,
                    )
            if loop.time() + pause >= deadline:
                return None
            await asyncio.sleep(pause)
            pause = min(pause * 2, _FLUSH_RETRY_MAX_S)
        return None

    async def _flush_rest(self, name: str, uploader: UploaderClient, end: int) -> None:
        """Offsets appended after the hand-over flush (e.g. dead-letter copies): best effort, the
        uploader ships them anyway."""
        try:
            uploaded = await uploader.flush(name, end)
        except DanubeError as exc:
            log.warning("topic %s: flushing the last offsets before the hand-over failed: %s", name, exc)
            return
        if uploaded < end:
            log.warning(
                "topic %s: handed over with offsets %d..%d not yet in object storage", name, uploaded, end - 1
            )

    async def _abandon(self, t: Topic, own: Ownership, why: str = "") -> None:
        backlog = {
            s.name: s.engine.backlog()
            for s in t.subscriptions.values()
            if s.engine is not None and s.engine.backlog()
        }
        kept = await self._res.abort_move(own)
        if kept is None:
            self._outcome(t.name, "lost")
            log.warning("topic %s: ownership changed while its move was abandoned; unloading", t.name)
            self._reg.unload(t.name, not_owned(t.name, "ownership changed"))
            return
        t.epoch = max(t.epoch, kept.epoch)
        t.end_seal()
        self._outcome(t.name, "abandoned")
        log.warning(
            "topic %s: move to %s abandoned after %.0fs: %s; the topic stays here",
            t.name,
            own.moving_to,
            self._timeout_s,
            why or f"subscriptions still had unacknowledged messages {backlog}",
        )

    async def aclose(self) -> None:
        err = await cancel_and_wait(*self._moves.values())
        if err is not None:
            raise err
