"""One reliable subscription: reads the topic's log, delivers through windows, tracks acks.

The engine owns everything between the log and the consumers of one subscription:

- a **read position** fed from the log (tail cache, else disk), only up to ``durable_offset``
  (for a ``cloud`` topic, only up to what object storage confirmed: a message is never delivered
  before it is as durable as its acknowledgement says);
  messages read but not delivered wait in a bounded read buffer, in offset order;
- **delivery** through the subscription's router (exclusive, shared, failover, key-shared),
  never more to a consumer than its window of unacked messages (``Consumer.window``): a full
  window is back-pressure, nothing is dropped;
- **acks** (individual, cumulative) into an :class:`AckTracker` whose cursor is persisted by the
  topic; **nacks**, **ack timeouts** and **disconnects** into redeliveries (see :mod:`pending`);
- **poison** handling once ``max_redeliveries`` is exceeded: block, drop or dead-letter;
- **delayed delivery** (shared and key-shared): a message read with a future ``deliver_at_ms``
  waits in the pending set's timer heap (state DELAYED, see :mod:`delayed`) instead of the read
  buffer, so the messages behind it go on; at most ``max_delayed`` are held before reading pauses.

Redeliveries go before new messages and in offset order, so under KeyShared a key's
redelivered messages reach its consumer before that key's newer messages. (A nack or ack
timeout with a delay lets newer messages of the key pass meanwhile, as in Pulsar.)

Everything but reading the log is synchronous. :meth:`run` is the thin loop that drives it:
fill the read buffer, :meth:`step`, then sleep until notified (new durable data, an ack, a
consumer change, a policy change, a seek) or until the next timer. Every state change that can
enable delivery calls :meth:`notify`; the wake event is cleared *before* the work, so a
notification during the work is never lost. The clock is injectable (monotonic seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from danube_broker.dispatch.base import Msg, SubType
from danube_broker.dispatch.reliable.acks import AckTracker, Ranges
from danube_broker.dispatch.reliable.dead_letter import DeadLetterSink, DeadLetterWorker
from danube_broker.dispatch.reliable.delayed import due_monotonic, honours_delays
from danube_broker.dispatch.reliable.log_port import CompactedSource, Entry, TopicLogPort
from danube_broker.dispatch.reliable.pending import Pending, PendingSet, State
from danube_broker.dispatch.reliable.policy import SubscriptionPolicy
from danube_broker.dispatch.reliable.recent import RecentMessages
from danube_broker.stats import Counters, Rate
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError
from danube_common.pb import DanubeApi_pb2 as pb

if TYPE_CHECKING:
    from danube_broker.consumer import Consumer
    from danube_broker.subscription import Subscription

log = logging.getLogger(__name__)

#: Messages read from the log at a time (and the read buffer's size).
DEFAULT_READ_BATCH = 256
#: Bytes read from the log at a time.
READ_MAX_BYTES = 4 << 20
#: Retry delays after a failed log read (first, cap), in seconds.
READ_RETRY_FIRST_S = 1.0
#: How often a dispatcher held back by uncertain ownership looks again.
HELD_RETRY_S = 0.05
READ_RETRY_MAX_S = 30.0
#: A gap in the history (HISTORY_GAP) right after a takeover is usually the previous owner's
#: uploader still uploading its log's tail: a read stalled on one is logged at WARNING for this
#: long, then at ERROR (every other read error at ERROR at once).
HISTORY_GAP_GRACE_S = 20.0
#: Delayed messages a subscription holds (read, not due yet) before it stops reading the log.
DEFAULT_MAX_DELAYED = 100_000


class SubscriptionEngine:
    #: Slots: one engine per subscription, thousands per broker (a dict per instance costs ~1 KiB).
    __slots__ = (
        "_clock",
        "_compaction",
        "_deliverable",
        "_fresh",
        "_gate",
        "_generation",
        "_held",
        "_max_delayed",
        "_max_pending",
        "_may_deliver",
        "_on_cursor",
        "_parked",
        "_parked_until",
        "_read_batch",
        "_recent",
        "_task",
        "_topic_counters",
        "_wake",
        "_wall_clock",
        "ack_timeouts_total",
        "acks",
        "acks_total",
        "compacted_total",
        "dead_lettered_total",
        "dead_letters",
        "delivered_total",
        "dropped_total",
        "log",
        "nacks_total",
        "pending",
        "policy",
        "rate_out",
        "read_error",
        "read_pos",
        "redelivered_total",
        "skipped_total",
        "sub",
    )

    def __init__(
        self,
        sub: Subscription,
        log_: TopicLogPort,
        *,
        policy: SubscriptionPolicy,
        cursor: int,
        clock: Callable[[], float],
        topic_counters: Counters,
        on_cursor: Callable[[], None] = lambda: None,
        dead_letter: DeadLetterSink | None = None,
        max_pending: int = 10_000,
        read_batch: int = DEFAULT_READ_BATCH,
        deliverable: Callable[[], int] | None = None,
        recent: RecentMessages | None = None,
        may_deliver: Callable[[], bool] | None = None,
        max_delayed: int = DEFAULT_MAX_DELAYED,
        wall_clock: Callable[[], float] = time.time,
        acked: Ranges = (),
        compaction: CompactedSource | None = None,
    ) -> None:
        """``cursor`` and ``acked``: what was persisted (every offset <= ``cursor``, and the
        ``acked`` ranges above it, are acknowledged: never delivered again)."""
        self.sub = sub
        #: False while the broker is not sure it still owns the topic (its registration lease
        #: may have expired: a paused process waking up): nothing is delivered then, since what
        #: it committed meanwhile may not be the topic's history (a new owner reuses offsets).
        self._may_deliver = may_deliver
        #: The topic's latest messages as objects (shared: never changed here), or None.
        self._recent = recent
        self.log = log_
        #: Offsets below this may be delivered (default: the log's durable offset; a ``cloud``
        #: topic delivers only what object storage confirmed).
        self._deliverable = deliverable or (lambda: log_.durable_offset)
        self.policy = policy
        self.acks = AckTracker(cursor)
        self.acks.restore(acked)
        self.read_pos = self.acks.cursor + 1
        self._clock = clock
        self._topic_counters = topic_counters
        self._on_cursor = on_cursor
        self._max_pending = max(max_pending, 1)
        self._read_batch = max(read_batch, 1)
        self._max_delayed = max(max_delayed, 1)
        #: Wall-clock seconds (delayed delivery's due times are wall-clock epoch milliseconds).
        self._wall_clock = wall_clock
        #: Read from the log, never delivered yet; offsets increasing.
        self._fresh: deque[Msg] = deque()
        self.pending = PendingSet()
        #: Bumped by seek: a log read that started before it is thrown away.
        self._generation = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The last step delivered nothing because ownership was uncertain (or the gate shut).
        self._held = False
        #: Namespace dispatch rate (``set_delivery_gate``): how many messages may go out now.
        self._gate: Callable[[], int] | None = None
        #: The task waits for a wake-up (nothing of it in progress), until ``_parked_until``.
        self._parked = False
        self._parked_until = math.inf
        self.dead_letters = DeadLetterWorker(self, dead_letter)
        # ---- counters
        self.delivered_total = 0
        self.redelivered_total = 0
        self.dead_lettered_total = 0
        self.dropped_total = 0
        self.ack_timeouts_total = 0
        self.nacks_total = 0
        self.acks_total = 0
        #: Offsets skipped because they were gone from the log (retention, or an accepted gap).
        self.skipped_total = 0
        self.rate_out = Rate()
        #: Why the last read of the log failed ("" once a read succeeds again), for stats.
        self.read_error = ""
        #: The topic's compacted view, read below its horizon (a subscription or reader with
        #: ``read_compacted``; None: the log alone).
        self._compaction = compaction
        #: Offsets a compacted view left out (acknowledged without delivery).
        self.compacted_total = 0

    # ------------------------------------------------------------------ views
    @property
    def cursor(self) -> int:
        return self.acks.cursor

    @property
    def name(self) -> str:
        return self.sub.name

    @property
    def blocked_at(self) -> int | None:
        return self.pending.blocked_at

    @property
    def unacked_in_flight(self) -> int:
        return self.pending.outstanding

    @property
    def pending_redeliveries(self) -> int:
        return len(self.pending) - self.pending.outstanding - self.pending.delayed

    @property
    def delayed(self) -> int:
        """Messages read and held back until their due time (delayed delivery)."""
        return self.pending.delayed

    def backlog(self) -> int:
        """Messages published and not acknowledged."""
        return max(0, self.log.next_offset - (self.acks.cursor + 1) - self.acks.acked_above)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"reliable-{self.sub.topic_name}-{self.name}")
        return self._task

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def aclose(self) -> None:
        """Stop dispatching (idempotent). Outstanding messages stay unacked: redelivered later."""
        task, self._task = self._task, None
        err = await cancel_and_wait(task)
        if err is not None:
            raise err
        await self.dead_letters.aclose()

    def notify(self) -> None:
        self._wake.set()

    def dispatch_now(self) -> None:
        """Messages were just published: deliver them here, without waking the dispatcher's
        task, when nothing needs waiting for (the task is parked and the records are in the
        tail cache); otherwise wake the task. With many quiet topics this saves a task
        switch per message."""
        if not self._parked:
            self._wake.set()
            return
        try:
            added = self._fill_cached()
        except DanubeError:
            added = None
        if added is None:
            self._wake.set()  # a read from disk, a gap or an error: the task's business
            return
        delivered = self.step()
        if self._held or ((delivered or added) and (self._fresh or self._readable())):
            self._wake.set()  # more than one pass' worth, or held back: the task's business
        elif self.next_deadline() < self._parked_until:
            self._wake.set()  # a timer earlier than the one the task waits for

    async def run(self) -> None:
        read_retry_s = READ_RETRY_FIRST_S
        failing_since: float | None = None  # the first failed read of the current streak
        while True:
            self._wake.clear()
            try:
                added = await self.fill()
                read_retry_s = READ_RETRY_FIRST_S
                failing_since = None
                self.read_error = ""
            except DanubeError as exc:
                # A damaged frame, a failing disk, a gap in the history or object storage out
                # of reach: this subscription stalls (what it holds can still be acked and
                # redelivered); the rest of the broker goes on. Nothing is skipped.
                self.read_error = str(exc)
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                young_gap = exc.code == "HISTORY_GAP" and now - failing_since < HISTORY_GAP_GRACE_S
                log.log(
                    logging.WARNING if young_gap else logging.ERROR,
                    "subscription %s on %s cannot read the log at offset %d (%s); retrying in %.0fs%s",
                    self.name,
                    self.sub.topic_name,
                    self.read_pos,
                    exc,
                    read_retry_s,
                    " (after a takeover the previous owner's uploader may still be uploading it; an ERROR "
                    f"follows if it lasts {HISTORY_GAP_GRACE_S:.0f}s)"
                    if young_gap
                    else "",
                )
                self.step()
                await asyncio.sleep(read_retry_s)
                read_retry_s = min(read_retry_s * 2, READ_RETRY_MAX_S)
                continue
            delivered = self.step()
            # Go on without waiting while there is more to do. A read that delivered nothing still
            # counts: its messages may all have been acked already (acks a client re-sent to a
            # new owner before it read that history), and no wake-up may ever come for the rest.
            if (delivered or added) and (self._fresh or self._readable()):
                continue
            if self._wake.is_set():
                continue
            deadline = self.next_deadline()
            if self._held:  # ownership uncertain: look again soon (it is renewed, or lost for good)
                deadline = min(deadline, self._clock() + HELD_RETRY_S)
            delay = deadline - self._clock()
            if delay <= 0:
                continue
            self._parked, self._parked_until = True, deadline
            try:
                if math.isinf(delay):
                    await self._wake.wait()
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
            finally:
                self._parked = False

    # ------------------------------------------------------------------ reading
    def _readable(self) -> bool:
        pending = self.pending
        return (
            pending.blocked_at is None
            and self.read_pos < self._deliverable()
            and len(self._fresh) < self._read_batch
            and len(pending) - pending.delayed + len(self._fresh) < self._max_pending
            and pending.delayed < self._max_delayed
        )

    def _room(self) -> int:
        pending = self.pending
        return min(
            self._read_batch - len(self._fresh),
            self._max_pending - len(pending) + pending.delayed - len(self._fresh),
            self._deliverable() - self.read_pos,
        )

    @property
    def read_compacted(self) -> bool:
        return self._compaction is not None

    def use_compaction(self, compaction: CompactedSource | None) -> None:
        """Read the compacted view from now on (None: the log alone); a reader re-attaching
        says so again, and seeks next."""
        self._compaction = compaction

    def _fill_view(self) -> int | None:
        """Below the compacted view's horizon: top up from the view (None: not below it, or the
        view has nothing more at or above the read position, which then moved to the horizon)."""
        comp = self._compaction
        view = comp.view if comp is not None else None
        if view is None or self.read_pos >= view.horizon:
            return None
        if not self._readable():
            return 0
        entries = view.read(self.read_pos, self._room())
        if entries:
            return self._add_entries(entries, compacted_below=view.horizon)
        self._skip_compacted(view.horizon)
        return None

    def _fill_cached(self) -> int | None:
        """:meth:`fill` from the tail cache only; None if that cannot be done without waiting."""
        log_ = self.log
        if self._compaction is not None:
            added = self._fill_view()
            if added is not None:
                return added
        if self.read_pos < log_.first_offset:
            return None
        if not self._readable():
            return 0
        entries = log_.read(self.read_pos, self._room(), READ_MAX_BYTES)
        return None if entries is None else self._add_entries(entries)

    async def fill(self) -> int:
        """Top up the read buffer from the log; return how many messages were added."""
        log_ = self.log
        if self._compaction is not None:
            added = self._fill_view()
            if added is not None:
                return added
        if self.read_pos < log_.first_offset:
            self._skip_gone(log_.first_offset)
        if not self._readable():
            return 0
        room = self._room()
        generation = self._generation
        entries = log_.read(self.read_pos, room, READ_MAX_BYTES)
        if entries is None:
            entries = await log_.read_async(self.read_pos, room, READ_MAX_BYTES)
            if generation != self._generation:
                return 0  # a seek moved the read position meanwhile
        return self._add_entries(entries)

    def _add_entries(self, entries: Sequence[Entry], compacted_below: int = 0) -> int:
        """``entries`` (increasing offsets) into the read buffer; a gap before one is skipped:
        compacted away below ``compacted_below`` (a view's entries), else gone from the log."""
        durable = self._deliverable()
        added = 0
        recent = self._recent
        delays = honours_delays(self.sub.sub_type)
        for e in entries:
            offset = e.offset
            if offset >= durable:
                break
            if offset < self.read_pos:
                continue
            if offset > self.read_pos:
                if offset <= compacted_below:
                    self._skip_compacted(offset)
                else:
                    self._skip_gone(offset)
            msg = recent.get(offset) if recent is not None else None
            if msg is None:
                msg = pb.StreamMessage.FromString(e.record)
                msg.msg_id.topic_offset = offset  # the log's offset is the truth
            self.read_pos = offset + 1
            added += 1
            if delays and msg.deliver_at_ms and self._held_back(offset, msg):
                continue
            self._fresh.append(msg)
        return added

    def _held_back(self, offset: int, msg: Msg) -> bool:
        """Delayed delivery: keep ``msg`` in the timer heap if it is not due yet (or drop it
        from the read if it is acknowledged already)."""
        if self.acks.is_acked(offset):
            return True
        if self.pending.get(offset) is not None:
            return False  # already tracked (a dead-letter copy in flight across a seek)
        due = due_monotonic(msg.deliver_at_ms, wall_now_s=self._wall_clock(), mono_now=self._clock())
        if due is None:
            return False
        self.pending.delay(Pending(offset, msg), due)
        return True

    def _skip_gone(self, upto: int) -> None:
        """Offsets [read_pos, upto) are no longer in the log: count them as acknowledged."""
        log.warning(
            "subscription %s on %s: offsets %d..%d are gone from the log; skipping them",
            self.name,
            self.sub.topic_name,
            self.read_pos,
            upto - 1,
        )
        self.skipped_total += max(0, upto - self.read_pos)
        for consumer in self.sub.consumers.values():
            consumer.note_skipped(self.read_pos, upto)
        if self.acks.cursor + 1 >= self.read_pos:
            moved = self.acks.ack_through(upto - 1)
        else:
            moved = self.acks.ack_many(range(self.read_pos, upto))
        self.read_pos = upto
        if moved:
            self._on_cursor()

    def _skip_compacted(self, upto: int) -> None:
        """Offsets [read_pos, upto) were compacted away: acknowledged, never delivered."""
        first = self.read_pos
        if upto <= first:
            return
        self.compacted_total += upto - first
        moved = self.acks.ack_range(first, upto - 1)
        self.read_pos = upto
        if moved:
            self._on_cursor()

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> float:
        """When :meth:`step` next has timed work (``inf``: none)."""
        deadline = self.pending.next_deadline(self.policy.ack_timeout_s)
        return math.inf if deadline is None else deadline

    def _expire(self, now: float) -> None:
        timeout = self.policy.ack_timeout_s
        if not math.isinf(timeout):
            for p in self.pending.timed_out(now, timeout):
                self.ack_timeouts_total += 1
                self._fail(p, "ack timeout", None, now)
        self.pending.wake_due(now)

    # ------------------------------------------------------------------ delivery
    def step(self) -> bool:
        """Run due timers and deliver what the consumers' windows allow; True if any was delivered."""
        if self._may_deliver is not None and not self._may_deliver():
            self._held = True
            return False
        self._held = False
        now = self._clock()
        self._expire(now)
        free = sum(max(0, c.free) for c in self.sub.consumers.values() if c.routable)
        if self._gate is not None and free > 0:
            free = min(free, self._gate())
            if free <= 0:
                self._held = True  # the gate is looked at again after HELD_RETRY_S
                return False
        if free <= 0:
            return False
        limit = free
        if self.sub.sub_type is SubType.KEY_SHARED:
            # Keys decide the consumer: look further than the free room so one full consumer
            # does not starve the others (the read buffer bounds this).
            limit = free + self.pending.ready + len(self._fresh)
        redeliver = self.pending.take_ready(limit, below=self.pending.blocked_at)
        for p in redeliver:
            if p.msg.redelivery_count != p.deliveries:
                # A copy: the message object may be shared with the topic's other subscriptions.
                copy = pb.StreamMessage()
                copy.CopyFrom(p.msg)
                copy.redelivery_count = p.deliveries
                p.msg = copy
        fresh = self._take_fresh(limit - len(redeliver))
        candidates = [p.msg for p in redeliver] + fresh if redeliver else fresh
        if not candidates:
            return False
        routing = self.sub.router.route(candidates)
        pending = self.pending
        count = bytes_out = 0
        full: list[Msg] = list(routing.overflow)  # had a consumer, but it was full
        for target, msgs in routing.assignments:
            consumer: Consumer = target  # type: ignore[assignment]
            room = max(0, consumer.free)
            batch = msgs if len(msgs) <= room else msgs[:room]
            n = consumer.deliver(batch) if batch else 0
            if n:
                redelivered, nbytes = pending.delivered_many(
                    batch if n == len(batch) else batch[:n], consumer, now
                )
                self.redelivered_total += redelivered
                bytes_out += nbytes
                count += n
            if n < len(msgs):
                full.extend(msgs[n:])
        if count < len(candidates):
            self._put_back(redeliver, fresh, {m.msg_id.topic_offset for m in full})
        if count:
            self._count_out(count, bytes_out, now)
        return count > 0

    def _take_fresh(self, limit: int) -> list[Msg]:
        """Up to ``limit`` never-delivered messages, skipping acked ones (none while blocked)."""
        fresh = self._fresh
        if self.pending.blocked_at is not None or limit <= 0 or not fresh:
            return []
        acks = self.acks
        if not acks.acked_above and fresh[0].msg_id.topic_offset > acks.cursor:
            # Offsets only grow along the buffer and nothing above the cursor is acked.
            return [fresh.popleft() for _ in range(min(limit, len(fresh)))]
        out: list[Msg] = []
        while fresh and len(out) < limit:
            m = fresh.popleft()
            if not acks.is_acked(m.msg_id.topic_offset):
                out.append(m)
        return out

    def _put_back(self, redeliver: list[Pending], fresh: list[Msg], full: set[int]) -> None:
        """Return what was not delivered: to the ready queue, or to the front of the read buffer.

        ``full`` had a consumer whose window was full. The rest had no consumer accepting its
        key: it is parked, unroutable, until the consumers change.
        """
        for p in redeliver:
            if p.state is State.OUTSTANDING:
                continue  # delivered
            if p.offset in full:
                self.pending.make_ready(p)
            else:
                self.pending.park(p, State.UNROUTABLE)
        back: list[Msg] = []
        for m in fresh:
            offset = m.msg_id.topic_offset
            if self.pending.get(offset) is not None:
                continue  # delivered
            if offset in full:
                back.append(m)
            else:
                self.pending.park(Pending(offset, m), State.UNROUTABLE)
        self._fresh.extendleft(reversed(back))

    def _count_out(self, count: int, nbytes: int, now: float) -> None:
        self.delivered_total += count
        self.rate_out.add(count, now)
        self.sub.msgs_out += count
        self.sub.bytes_out += nbytes
        counters = self._topic_counters
        counters.msgs_out += count
        counters.bytes_out += nbytes
        if counters.watch is not None:
            counters.moved()

    # ------------------------------------------------------------------ consumers
    def on_consumers_changed(self) -> None:
        """The routable consumers changed: take back what departed consumers held."""
        for consumer in list(self.pending.holders.values()):
            if consumer.closed or not consumer.routable:
                self.reclaim(consumer)
        self.pending.retry_unroutable()
        self.notify()

    def reclaim(self, consumer: Consumer) -> None:
        """``consumer`` is gone (stream ended, closed): its unacked messages are redelivered now.

        Not a failed delivery (``max_redeliveries`` is not charged: a broken connection says
        nothing about the message). Messages still in its queue were never sent, so their
        delivery is not counted either; the rest are marked as redelivered.
        """
        unsent = {m.msg_id.topic_offset for m in consumer.queue.take(len(consumer.queue))}
        self.pending.reclaim(consumer, unsent)
        self.notify()

    # ------------------------------------------------------------------ acks
    def ack(self, offsets: Iterable[int]) -> None:
        """Individual acks (unknown, repeated and never-published offsets are ignored)."""
        limit = self.log.next_offset
        is_acked = self.acks.is_acked
        new = [o for o in offsets if o < limit and not is_acked(o)]
        if new:
            self.acks_total += len(new)
            self.pending.remove_many(new)
            self.acks.ack_many(new)
            self._on_cursor()  # the cursor moved, or the acked ranges above it changed
        self._notify_if_waiting()

    def ack_through(self, offset: int) -> None:
        """Cumulative ack: everything <= ``offset``."""
        offset = min(offset, self.log.next_offset - 1)
        if offset <= self.acks.cursor:
            return
        for o in [p.offset for p in self.pending.values() if p.offset <= offset]:
            self.pending.remove(o)
        self.acks_total += 1
        if self.acks.ack_through(offset):
            self._on_cursor()
        self._notify_if_waiting()

    def _notify_if_waiting(self) -> None:
        """After acks: wake the dispatcher only if something waits to be delivered (the acks may
        have opened a window it was held by). With nothing to deliver, the next publish wakes it:
        one wake-up per message instead of two."""
        if self._fresh or self.pending.ready or self.read_pos < self._deliverable():
            self.notify()

    def nack(self, offset: int, *, delay_ms: int | None = None, reason: str = "") -> None:
        """A consumer could not process ``offset``: redeliver after ``delay_ms`` or the backoff."""
        p = self.pending.get(offset)
        if p is None or p.state is not State.OUTSTANDING:
            return
        self.nacks_total += 1
        why = f"nack: {reason}" if reason else "nack"
        self._fail(p, why, None if delay_ms is None else delay_ms / 1000.0, self._clock())
        self.notify()

    def _fail(self, p: Pending, reason: str, delay_s: float | None, now: float) -> None:
        p.failures += 1
        p.reason = reason
        if self.policy.exhausted(p.failures):
            self._poison(p)
            return
        delay = self.policy.backoff_s(p.failures) if delay_s is None else delay_s
        self.pending.schedule(p, now + delay, now)

    # ------------------------------------------------------------------ poison
    def _poison(self, p: Pending) -> None:
        policy = self.policy.poison_policy
        where = (self.name, self.sub.topic_name, p.offset, p.failures, p.reason)
        if policy == "drop":
            log.warning("subscription %s on %s: dropping offset %d after %d failed deliveries (%s)", *where)
            self.dropped_total += 1
            self.ack([p.offset])
        elif policy == "dead_letter" and self.dead_letters.available:
            self.pending.park(p, State.DEAD_LETTERING)
            self.dead_letters.submit(p)
        else:
            if self.pending.blocked_at is None or p.offset < self.pending.blocked_at:
                log.warning(
                    "subscription %s on %s is blocked at offset %d after %d failed deliveries (%s): "
                    "ack it, seek past it, or change the subscription's poison policy",
                    *where,
                )
            self.pending.park(p, State.BLOCKED)

    def dead_lettering(self, offset: int) -> Pending | None:
        """The pending record of ``offset`` if it is waiting for its dead-letter copy."""
        p = self.pending.get(offset)
        return p if p is not None and p.state is State.DEAD_LETTERING else None

    def dead_lettered(self, offset: int) -> None:
        """The dead-letter copy of ``offset`` is durable: acknowledge the original."""
        if self.dead_lettering(offset) is not None:
            self.dead_lettered_total += 1
            self.ack([offset])

    @property
    def delivery_gate(self) -> Callable[[], int] | None:
        return self._gate

    def set_delivery_gate(self, gate: Callable[[], int] | None) -> None:
        """A bound on each delivery step (a namespace's dispatch rate: how many messages may go
        out now; 0 holds deliveries back a while); None removes it."""
        self._gate = gate
        self.notify()

    def set_policy(self, policy: SubscriptionPolicy) -> None:
        """Apply a new failure policy at once (blocked messages are re-judged under it)."""
        self.policy = policy
        for p in self.pending.blocked():
            if not policy.exhausted(p.failures):
                self.pending.make_ready(p)
            elif policy.poison_policy != "block":
                self._poison(p)
        self.notify()

    # ------------------------------------------------------------------ seek
    async def seek_to_time(self, publish_time_ms: int) -> int:
        """Continue from the first message published at or after ``publish_time_ms``."""
        return self.seek(await self.log.offset_for_time(publish_time_ms))

    def seek(self, offset: int) -> int:
        """Continue from ``offset`` (clamped to the log): the cursor becomes ``offset - 1``.

        Seeking back replays from there; seeking forward acknowledges everything before.
        Pending redeliveries are forgotten, and what consumers hold unacked is taken back
        (messages still queued for them are not sent). A dead-letter publish in progress
        finishes (its ack then counts like any late ack).
        """
        floor = self.log.first_offset
        view = self._compaction.view if self._compaction is not None else None
        if view is not None:
            floor = min(floor, view.first_offset)  # the view may reach below the log's start
        offset = max(floor, min(offset, self.log.next_offset))
        for consumer in self.pending.holders.values():
            consumer.queue.take(len(consumer.queue))
        self.pending.clear(keep=State.DEAD_LETTERING)
        self.dead_letters.forget_queued()
        self._fresh.clear()
        self._generation += 1
        self.read_pos = offset
        self.acks.reset(offset - 1)
        self._on_cursor()
        self.notify()
        log.info("subscription %s on %s sought to offset %d", self.name, self.sub.topic_name, offset)
        return offset
