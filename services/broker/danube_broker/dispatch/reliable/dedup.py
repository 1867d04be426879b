"""Idempotent producers: dropping re-sent messages by (producer name, sequence id).

A message with ``sequence_id > 0`` is a duplicate when its sequence id is not above the highest
one already accepted for its producer name on this topic: the log's ``last_sequence`` (stored or
being committed; exact after a crash) or one accepted by a publish that has not reached the
log yet. A duplicate is not stored again; it is acked with the offset its original got, while
that is still remembered (the last ``recent_per_producer`` sequence ids of each producer; after
a restart the topic re-learns them from the log's tail, see :meth:`Dedup.seed`), else with
:data:`UNKNOWN_OFFSET`. A duplicate of a message still being committed is acked only once that
commit is durable, and fails with it.

Sequence ids must grow per producer name. After a storage failure the accepted high-water mark
falls back to what the log stored, so a producer re-sending the failed batches (in order, as
clients do after an error) gets them stored.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from danube_broker.dispatch.base import Msg

#: Offset reported for a duplicate whose original offset is no longer known (uint64 max).
UNKNOWN_OFFSET = 2**64 - 1


class PendingAppend:
    """One append of new messages: its first offset, once the log has it durable."""

    __slots__ = ("done", "seqs")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[int] = loop.create_future()
        self.done.add_done_callback(_retrieve)
        #: The sequence ids of its new messages, in order (0: none), until it is settled.
        self.seqs: list[int] | None = None

    def stored(self, first: int) -> None:
        if not self.done.done():
            self.done.set_result(first)

    def failed(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


def _retrieve(fut: asyncio.Future[int]) -> None:
    if not fut.cancelled():
        fut.exception()  # mark retrieved: duplicates may never look at it


#: Where a message was stored: its offset, or (its append, its index among that append's new
#: messages) while the append may still be in progress.
Where = int | tuple[PendingAppend, int]


@dataclass(slots=True)
class _Producer:
    hi: int = 0
    #: seq -> where, oldest first
    recent: OrderedDict[int, Where] = field(default_factory=OrderedDict)


@dataclass(slots=True)
class Split:
    #: Messages to store, in order.
    new: list[Msg]
    #: (index in the batch, where the original is, or None when not remembered).
    duplicates: list[tuple[int, Where | None]]
    append: PendingAppend


class Dedup:
    def __init__(
        self,
        last_sequence: Callable[[str], int],
        *,
        recent_per_producer: int = 16_384,
        producers: int = 10_000,
    ) -> None:
        self._last_sequence = last_sequence
        self._recent_cap = recent_per_producer
        self._producers_cap = producers
        self._producers: OrderedDict[str, _Producer] = OrderedDict()
        #: The loop of the first split (asyncio.get_running_loop() is a getpid() system call per
        #: call on CPython 3.11; a topic lives on one loop).
        self._loop: asyncio.AbstractEventLoop | None = None

    def split(self, producer_name: str, msgs: list[Msg]) -> Split:
        """Separate new messages from duplicates (and remember the new ones' sequence ids)."""
        split = self._split(producer_name, msgs, only_new=False)
        assert split is not None
        return split

    def split_new(self, producer_name: str, msgs: list[Msg]) -> Split | None:
        """:meth:`split` when no message of ``msgs`` is a duplicate; None (and nothing
        remembered) otherwise."""
        return self._split(producer_name, msgs, only_new=True)

    def _split(self, producer_name: str, msgs: list[Msg], *, only_new: bool) -> Split | None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if not any(m.sequence_id for m in msgs):
            return Split(msgs, [], PendingAppend(loop))
        state = self._state(producer_name)
        hi = max(state.hi, self._last_sequence(producer_name))
        new: list[Msg] = []
        dups: list[tuple[int, Where | None]] = []
        seqs: list[int] = []  # of ``new``, 0 for none
        recent = state.recent
        for i, m in enumerate(msgs):
            seq = m.sequence_id
            if seq and seq <= hi:
                if only_new:
                    return None
                dups.append((i, recent.get(seq)))
                continue
            if seq:
                hi = seq
            seqs.append(seq)
            new.append(m)
        append = PendingAppend(loop)
        append.seqs = seqs
        for index, seq in enumerate(seqs):
            if seq:
                recent[seq] = (append, index)
        while len(recent) > self._recent_cap:
            recent.popitem(last=False)
        state.hi = hi
        return Split(new, dups, append)

    def stored(self, producer_name: str, append: PendingAppend, first: int) -> None:
        """``append`` is durable from offset ``first``: its duplicates learn it, and its entries
        become plain offsets. (Left as (append, index) they would keep the append and its future
        alive for as long as they are remembered, 16,384 messages per producer: at 100 topics,
        over a million objects the garbage collector walks, in 0.5 s pauses.)"""
        append.stored(first)
        seqs, append.seqs = append.seqs, None
        state = self._producers.get(producer_name)
        if not seqs or state is None:
            return
        recent = state.recent
        for index, seq in enumerate(seqs):
            if seq:
                where = recent.get(seq)
                if isinstance(where, tuple) and where[0] is append:
                    recent[seq] = first + index

    def failed(self, producer_name: str, append: PendingAppend) -> None:
        """``append`` was not stored: forget its sequence ids, fall back to the log's mark."""
        state = self._producers.get(producer_name)
        if state is not None:
            state.hi = 0
            self._drop(state, append)

    def forget(self, producer_name: str, append: PendingAppend) -> None:
        """``append`` is stored (or will be) at offsets we will not learn: forget them only."""
        state = self._producers.get(producer_name)
        if state is not None:
            self._drop(state, append)

    @staticmethod
    def _drop(state: _Producer, append: PendingAppend) -> None:
        for seq in [s for s, w in state.recent.items() if isinstance(w, tuple) and w[0] is append]:
            del state.recent[seq]

    def lookup(self, producer_name: str, seq: int) -> Where | None:
        state = self._producers.get(producer_name)
        return state.recent.get(seq) if state is not None else None

    def seed(self, producer_name: str, stored: list[tuple[int, int]]) -> None:
        """Learn (sequence id, offset) pairs of messages stored before (read from the log's tail,
        oldest first); what is remembered already wins."""
        state = self._state(producer_name)
        merged: OrderedDict[int, Where] = OrderedDict(
            (seq, off) for seq, off in stored if seq not in state.recent
        )
        merged.update(state.recent)
        while len(merged) > self._recent_cap:
            merged.popitem(last=False)
        state.recent = merged

    def _state(self, name: str) -> _Producer:
        state = self._producers.get(name)
        if state is None:
            state = self._producers[name] = _Producer()
            while len(self._producers) > self._producers_cap:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(name)
        return state


async def original_offset(where: Where | None) -> int:
    """The offset a duplicate's original was stored at (waits for its commit; raises its error)."""
    if where is None:
        return UNKNOWN_OFFSET
    if isinstance(where, int):
        return where
    append, index = where
    first = await asyncio.shield(append.done)
    return first + index
