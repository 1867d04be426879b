"""The messages a subscription has delivered (or tried to) and not yet seen acknowledged.

Each such message has one :class:`Pending` record, in exactly one state:

- ``OUTSTANDING``: delivered to a consumer (queued for it or sent), counting against its
  window; ack timeouts are checked in delivery order;
- ``WAITING``: failed (nack, ack timeout), redelivery scheduled at a due time;
- ``READY``: eligible for (re)delivery now, taken in offset order;
- ``BLOCKED``: poison under the ``block`` policy: nothing past it is delivered;
- ``DEAD_LETTERING``: poison whose dead-letter copy is being published;
- ``UNROUTABLE``: no consumer accepts its key (KeyShared filters); retried when consumers change;
- ``DELAYED``: never delivered, its producer asked for it no earlier than a due time (delayed
  delivery); it shares the WAITING timer heap and becomes READY when due.

Messages read but never delivered are not here: they wait in the engine's read buffer.
:class:`PendingSet` is pure bookkeeping (the caller passes the time); heaps use lazy deletion,
so a record that left a state may leave a stale heap entry behind, skipped when reached.
"""

from __future__ import annotations

import enum
import heapq
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from danube_broker.dispatch.base import Msg

if TYPE_CHECKING:
    from danube_broker.consumer import Consumer


class State(enum.Enum):
    OUTSTANDING = "outstanding"
    WAITING = "waiting"
    READY = "ready"
    BLOCKED = "blocked"
    DEAD_LETTERING = "dead_lettering"
    UNROUTABLE = "unroutable"
    DELAYED = "delayed"


class Pending:
    __slots__ = (
        "consumer",
        "delivered_at",
        "deliveries",
        "failures",
        "msg",
        "offset",
        "reason",
        "state",
        "token",
    )

    def __init__(self, offset: int, msg: Msg) -> None:
        self.offset = offset
        self.msg = msg
        self.state = State.READY
        #: Times handed to a consumer (what ``redelivery_count`` reports on the next delivery).
        self.deliveries = 0
        #: Nacks and ack timeouts: what ``max_redeliveries`` counts. Disconnects do not count.
        self.failures = 0
        self.consumer: Consumer | None = None
        self.delivered_at = 0.0
        #: Identifies the current WAITING schedule (stale heap entries carry an older token).
        self.token = 0
        #: Why it last failed (goes into x-failure-reason on the dead-letter copy).
        self.reason = ""


class PendingSet:
    def __init__(self) -> None:
        self._by_offset: dict[int, Pending] = {}
        #: OUTSTANDING records in delivery order: the first is the next to time out.
        self._outstanding: OrderedDict[int, Pending] = OrderedDict()
        #: WAITING: (due, token, offset).
        self._waiting: list[tuple[float, int, int]] = []
        self._next_token = 0
        #: READY offsets, smallest first.
        self._ready: list[int] = []
        self._unroutable: list[int] = []
        self._blocked: set[int] = set()
        #: Records in state DELAYED.
        self.delayed = 0
        #: Consumers holding OUTSTANDING records, by id.
        self.holders: dict[int, Consumer] = {}

    # ---- views
    def __len__(self) -> int:
        return len(self._by_offset)

    def get(self, offset: int) -> Pending | None:
        return self._by_offset.get(offset)

    def values(self) -> Iterator[Pending]:
        return iter(self._by_offset.values())

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def blocked_at(self) -> int | None:
        return min(self._blocked) if self._blocked else None

    def next_deadline(self, ack_timeout_s: float) -> float | None:
        """The earliest ack-timeout deadline or scheduled redelivery (None: nothing timed)."""
        deadline = None
        if self._outstanding:
            oldest = next(iter(self._outstanding.values()))
            deadline = oldest.delivered_at + ack_timeout_s
        if self._waiting:
            due = self._waiting[0][0]
            deadline = due if deadline is None else min(deadline, due)
        return deadline

    # ---- transitions
    def delivered_many(self, msgs: list[Msg], consumer: Consumer, now: float) -> tuple[int, int]:
        """``msgs`` were handed to ``consumer``: OUTSTANDING (records made on first delivery).

        Returns (how many were redeliveries, their payload bytes). The hot path: one loop.
        """
        by_offset = self._by_offset
        outstanding = self._outstanding
        unacked = consumer.unacked
        state = State.OUTSTANDING
        redelivered = nbytes = 0
        for m in msgs:
            offset = m.msg_id.topic_offset
            p = by_offset.get(offset)
            if p is None:
                p = by_offset[offset] = Pending(offset, m)
            else:
                if p.deliveries:
                    redelivered += 1
                outstanding.pop(offset, None)
            p.state = state
            p.consumer = consumer
            p.delivered_at = now
            p.deliveries += 1
            outstanding[offset] = p
            unacked.add(offset)
            nbytes += len(m.payload)
        self.holders[consumer.id] = consumer
        return redelivered, nbytes

    def remove(self, offset: int) -> Pending | None:
        """Forget ``offset`` (acknowledged)."""
        p = self._by_offset.pop(offset, None)
        if p is not None:
            self._release(p)
        return p

    def remove_many(self, offsets: list[int]) -> None:
        """Forget every offset of ``offsets`` (acknowledged); the common case inline."""
        pop = self._by_offset.pop
        outstanding = self._outstanding
        state = State.OUTSTANDING
        for offset in offsets:
            p = pop(offset, None)
            if p is None:
                continue
            if p.state is state:
                del outstanding[offset]
                if p.consumer is not None:
                    p.consumer.unacked.discard(offset)
                    p.consumer = None
            else:
                self._release(p)

    def _release(self, p: Pending) -> None:
        """Take ``p`` out of its state's structures (heap entries go stale)."""
        if p.state is State.OUTSTANDING:
            self._outstanding.pop(p.offset, None)
            if p.consumer is not None:
                p.consumer.unacked.discard(p.offset)
            p.consumer = None
        elif p.state is State.BLOCKED:
            self._blocked.discard(p.offset)
        elif p.state is State.DELAYED:
            self.delayed -= 1
        p.state = State.READY

    def make_ready(self, p: Pending) -> None:
        self._release(p)
        heapq.heappush(self._ready, p.offset)

    def schedule(self, p: Pending, due: float, now: float) -> None:
        """Redeliver ``p`` at ``due`` (at once if that has passed)."""
        if due <= now:
            self.make_ready(p)
            return
        self._release(p)
        self._next_token += 1
        p.token = self._next_token
        p.state = State.WAITING
        heapq.heappush(self._waiting, (due, p.token, p.offset))

    def delay(self, p: Pending, due: float) -> None:
        """A never-delivered message held until ``due`` (delayed delivery): DELAYED. ``p`` must
        be new (no record of its offset yet)."""
        self._by_offset[p.offset] = p
        self._release(p)
        self._next_token += 1
        p.token = self._next_token
        p.state = State.DELAYED
        self.delayed += 1
        heapq.heappush(self._waiting, (due, p.token, p.offset))

    def park(self, p: Pending, state: State) -> None:
        """BLOCKED, DEAD_LETTERING or UNROUTABLE (created here for a never-delivered message)."""
        self._by_offset.setdefault(p.offset, p)
        self._release(p)
        p.state = state
        if state is State.BLOCKED:
            self._blocked.add(p.offset)
        elif state is State.UNROUTABLE:
            self._unroutable.append(p.offset)

    def blocked(self) -> list[Pending]:
        return [self._by_offset[o] for o in sorted(self._blocked)]

    # ---- timers
    def timed_out(self, now: float, ack_timeout_s: float) -> list[Pending]:
        """OUTSTANDING records delivered at least ``ack_timeout_s`` ago, oldest first."""
        out: list[Pending] = []
        for p in self._outstanding.values():
            if p.delivered_at + ack_timeout_s > now:
                break
            out.append(p)
        return out

    def wake_due(self, now: float) -> None:
        """Scheduled redeliveries and delayed messages whose time has come become READY."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            _, token, offset = heapq.heappop(waiting)
            p = self._by_offset.get(offset)
            if p is not None and p.token == token and p.state in (State.WAITING, State.DELAYED):
                if p.state is State.DELAYED:
                    self.delayed -= 1
                p.state = State.READY
                heapq.heappush(self._ready, offset)

    # ---- dispatch
    def take_ready(self, limit: int, *, below: int | None) -> list[Pending]:
        """Up to ``limit`` READY records in offset order (only offsets <= ``below`` if given).

        They leave the ready queue: deliver them, or hand them back with :meth:`make_ready` or
        :meth:`park`.
        """
        out: list[Pending] = []
        ready = self._ready
        while ready and len(out) < limit:
            offset = ready[0]
            if below is not None and offset > below:
                break
            heapq.heappop(ready)
            p = self._by_offset.get(offset)
            if p is not None and p.state is State.READY:
                out.append(p)
        return out

    def reclaim(self, consumer: Consumer, unsent: set[int]) -> int:
        """``consumer`` is gone: what it holds is READY now. Offsets in ``unsent`` never left
        its queue, so their delivery is not counted. Returns how many were reclaimed."""
        n = 0
        for offset in sorted(consumer.unacked):
            p = self._by_offset.get(offset)
            if p is None or p.state is not State.OUTSTANDING or p.consumer is not consumer:
                continue
            if offset in unsent:
                p.deliveries -= 1
            self.make_ready(p)
            n += 1
        consumer.unacked.clear()
        self.holders.pop(consumer.id, None)
        return n

    def retry_unroutable(self) -> None:
        for offset in self._unroutable:
            p = self._by_offset.get(offset)
            if p is not None and p.state is State.UNROUTABLE:
                self.make_ready(p)
        self._unroutable.clear()

    def clear(self, *, keep: State | None = None) -> None:
        """Forget everything (seek), except records in state ``keep``; consumers' holds go."""
        for consumer in self.holders.values():
            consumer.unacked.clear()
        self.holders.clear()
        self._by_offset = {o: p for o, p in self._by_offset.items() if keep is not None and p.state is keep}
        self.delayed = sum(p.state is State.DELAYED for p in self._by_offset.values())
        self._outstanding.clear()
        self._waiting.clear()
        self._ready.clear()
        self._unroutable.clear()
        self._blocked.clear()
