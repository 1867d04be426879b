"""A reliable topic's log across owners: who writes it now, from which offset, where it ended.

Offsets of a reliable topic are assigned by one broker at a time (the **writer**). Ownership moves
(hand-over, release, a dead broker's topics re-placed), and each writer continues the same
sequence of offsets. The **log record** ``/{cluster}/storage/{ns}/{topic}/state`` says how:

- while a writer holds the log it is **open**: ``{writer, epoch, start_offset, incarnation}``.
  The writer wrote it itself, in a transaction fenced on its ownership epoch, *before* assigning
  any offset: a writer's stint is recorded before it exists;
- once the writer is done it is **closed** at an exact ``next_offset``: by the writer itself at a
  hand-over or a release, by the writer's WAL uploader when the writer died (it reads the intact
  end of the log on the dead writer's disk), or by an explicit, recorded operator decision
  (``forced``: the writer's disk is gone for good).

A new owner continues at a closed record's ``next_offset``. **It never decides by timing out**: a
record still open by another broker means waiting (clients get a retryable TAKEOVER_PENDING),
because only that broker's disk knows how far the log got. Only ``cloud`` topics do not wait: a
publish to them is acknowledged only once object storage holds it, so the upload checkpoint bounds
every acknowledged offset.

Every write that depends on the record is a transaction comparing its ``mod_revision``: a new
writer's open closes the door on a late close by an old writer's uploader (and the other way
round), and an uploader writes descriptors only for offsets its broker's stints wrote
(:func:`upload_bound`). So two brokers never write the same offsets of the topic's history.

**Reservation.** ``/storage/{t}/reserved`` = ``{reserved_to}``: the writer never assigns an
offset at or above it without first extending it (fenced). An unclean takeover, where the
writer's disk is lost, starts at ``reserved_to``: past any offset the writer may have
acknowledged, so no offset is ever reused, and the range between what object storage holds and
``reserved_to`` is recorded as an **accepted gap** (``/storage/{t}/gaps/{start}``) that readers
skip and count.

**Incarnation.** Records carry the topic's incarnation (the ``create_revision`` of its metadata
key): a topic deleted and created again never continues the old one's log.

Pure functions decide (:func:`decide_open`, :func:`upload_bound`, :func:`forced_end`); the
:class:`LogRecords` methods are the thin transactions around them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from danube_common.errors import FailedPrecondition, HistoryConflict
from danube_common.keys import Keys
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.topic_name import TopicName

#: An upload bound meaning "no limit" (the log is this broker's and still open).
UNBOUNDED = 1 << 63
#: At most this many producers' sequence ids are carried from one writer to the next.
MAX_CARRIED_SEQUENCES = 10_000

#: Who closed a stint: the writer at a hand-over or release; its uploader after its death; the
#: writer itself after a restart (its own earlier stint, read from its own disk); the next owner of
#: a ``cloud`` topic (at what object storage holds); an operator or an unclean-takeover policy.
CLOSED_BY = ("hand_over", "release", "uploader", "writer_restart", "cloud", "forced", "legacy")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def merge_sequences(*maps: Mapping[str, int] | None) -> dict[str, int]:
    """Highest sequence id per producer name over ``maps`` (at most MAX_CARRIED_SEQUENCES
    producers: those with the highest ids are kept)."""
    out: dict[str, int] = {}
    for m in maps:
        for name, seq in (m or {}).items():
            if seq > out.get(name, 0):
                out[name] = int(seq)
    if len(out) > MAX_CARRIED_SEQUENCES:
        kept = sorted(out.items(), key=lambda kv: kv[1], reverse=True)[:MAX_CARRIED_SEQUENCES]
        out = dict(kept)
    return out


# ---------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class LogState:
    """The log record: the current (open) or last (closed) writer's stint."""

    writer: str
    #: The writer's ownership epoch when it opened the stint.
    epoch: int
    start_offset: int
    #: The topic's incarnation (None: a record from before incarnations; matches any).
    incarnation: int | None = None
    #: Exact end once closed (None: open).
    next_offset: int | None = None
    closed_by: str = ""
    #: Who decided and why (forced closes), or other context.
    detail: str = ""
    #: Highest sequence id per producer name stored before this stint (open) / up to its end
    #: (closed): idempotent producers keep their deduplication across owners.
    producer_sequences: dict[str, int] = field(default_factory=dict)
    opened_at_ms: int = 0
    closed_at_ms: int = 0
    #: The stint this one continued from, as recorded when it opened (audit).
    previous: dict[str, Any] | None = None
    #: The writer acknowledges a publish only once object storage holds it (durability
    #: ``cloud`` with a WAL uploader): the upload checkpoint then bounds every acked offset.
    cloud_acks: bool = False
    #: The key's mod_revision when read (not stored): transactions compare it.
    revision: int = 0

    @property
    def open(self) -> bool:
        return self.next_offset is None

    def matches(self, incarnation: int | None) -> bool:
        """Whether this record belongs to the topic incarnation ``incarnation``."""
        return self.incarnation is None or self.incarnation == incarnation

    def summary(self, *, next_offset: int | None = None, closed_by: str | None = None) -> dict[str, Any]:
        """A compact description (for ``previous``, logs and admin output)."""
        end = self.next_offset if next_offset is None else next_offset
        return {
            "writer": self.writer,
            "epoch": self.epoch,
            "start_offset": self.start_offset,
            "next_offset": end,
            "closed_by": closed_by if closed_by is not None else self.closed_by,
        }

    def closed(
        self,
        next_offset: int,
        closed_by: str,
        *,
        sequences: Mapping[str, int] | None = None,
        detail: str = "",
    ) -> LogState:
        return replace(
            self,
            next_offset=next_offset,
            closed_by=closed_by,
            detail=detail,
            producer_sequences=merge_sequences(self.producer_sequences, sequences),
            closed_at_ms=now_ms(),
        )

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "writer": self.writer,
            "epoch": self.epoch,
            "start_offset": self.start_offset,
            "incarnation": self.incarnation,
            "open": self.open,
            "opened_at_ms": self.opened_at_ms,
        }
        if self.cloud_acks:
            d["cloud_acks"] = True
        if self.producer_sequences:
            d["producer_sequences"] = dict(self.producer_sequences)
        if self.previous is not None:
            d["previous"] = self.previous
        if not self.open:
            d.update(
                next_offset=self.next_offset,
                closed_by=self.closed_by,
                closed_at_ms=self.closed_at_ms,
            )
        if self.detail:
            d["detail"] = self.detail
        return d

    @classmethod
    def from_json(cls, d: Any, *, revision: int = 0, key: str = "") -> LogState:
        try:
            if "writer" not in d:
                # A record from before stints existed: only where the log ended.
                end = int(d["next_offset"])
                return cls(
                    writer=str(d.get("broker_id", "")),
                    epoch=int(d.get("epoch", 0)),
                    start_offset=end,
                    next_offset=end,
                    closed_by="legacy",
                    revision=revision,
                )
            inc = d.get("incarnation")
            nxt = None if d.get("open", False) else int(d["next_offset"])
            return cls(
                writer=str(d["writer"]),
                epoch=int(d["epoch"]),
                start_offset=int(d["start_offset"]),
                incarnation=None if inc is None else int(inc),
                next_offset=nxt,
                closed_by=str(d.get("closed_by", "")),
                detail=str(d.get("detail", "")),
                producer_sequences={str(k): int(v) for k, v in (d.get("producer_sequences") or {}).items()},
                opened_at_ms=int(d.get("opened_at_ms", 0)),
                closed_at_ms=int(d.get("closed_at_ms", 0)),
                previous=d.get("previous"),
                cloud_acks=bool(d.get("cloud_acks", False)),
                revision=revision,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HistoryConflict(
                f"the log record {key or '(state)'} is malformed ({exc!r}): {d!r}; an operator must repair it"
            ) from exc

    @classmethod
    def from_kv(cls, kv: KeyValue) -> LogState:
        return cls.from_json(kv.json(), revision=kv.mod_revision, key=kv.key)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The writer never assigns an offset at or above ``reserved_to``."""

    reserved_to: int
    writer: str
    epoch: int
    #: The stint it belongs to (its start offset).
    start_offset: int
    revision: int = 0

    def belongs_to(self, state: LogState) -> bool:
        return (self.writer, self.epoch, self.start_offset) == (state.writer, state.epoch, state.start_offset)

    def to_json(self) -> dict[str, Any]:
        return {
            "reserved_to": self.reserved_to,
            "writer": self.writer,
            "epoch": self.epoch,
            "start_offset": self.start_offset,
        }

    @classmethod
    def from_kv(cls, kv: KeyValue) -> Reservation | None:
        d = kv.json()
        try:
            return cls(
                int(d["reserved_to"]),
                str(d["writer"]),
                int(d["epoch"]),
                int(d["start_offset"]),
                revision=kv.mod_revision,
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class AcceptedGap:
    """Offsets ``[start_offset, next_offset)`` were declared lost by a recorded decision."""

    start_offset: int
    next_offset: int
    reason: str = ""
    decided_by: str = ""
    at_ms: int = 0
    #: The writer whose unrecoverable tail this is.
    writer: str = ""

    @property
    def size(self) -> int:
        return self.next_offset - self.start_offset

    def covers(self, offset: int) -> bool:
        return self.start_offset <= offset < self.next_offset

    def to_json(self) -> dict[str, Any]:
        return {
            "start_offset": self.start_offset,
            "next_offset": self.next_offset,
            "reason": self.reason,
            "decided_by": self.decided_by,
            "at_ms": self.at_ms,
            "writer": self.writer,
        }

    @classmethod
    def from_json(cls, d: Any) -> AcceptedGap:
        return cls(
            int(d["start_offset"]),
            int(d["next_offset"]),
            str(d.get("reason", "")),
            str(d.get("decided_by", "")),
            int(d.get("at_ms", 0)),
            str(d.get("writer", "")),
        )


def checkpoint_value(next_offset: int, *, broker_id: str, incarnation: int | None) -> dict[str, Any]:
    """The upload checkpoint's value (``Keys.upload_checkpoint``)."""
    return {"next_offset": next_offset, "broker_id": broker_id, "incarnation": incarnation, "at_ms": now_ms()}


def checkpoint_of(value: Any, incarnation: int | None) -> int | None:
    """The checkpoint's offset, if it belongs to ``incarnation`` (None: absent or another's)."""
    if not isinstance(value, dict) or "next_offset" not in value:
        return None
    inc = value.get("incarnation")
    if inc is not None and incarnation is not None and int(inc) != incarnation:
        return None
    return int(value["next_offset"])


@dataclass(frozen=True, slots=True)
class LogView:
    """One consistent read of a topic's log record, reservation and upload checkpoint."""

    state: LogState | None
    reservation: Reservation | None
    #: The upload checkpoint's offset (None: none yet, or another incarnation's).
    checkpoint: int | None
    #: mod_revisions (0: the key is absent), compared by transactions.
    state_revision: int = 0
    reservation_revision: int = 0
    checkpoint_revision: int = 0


# ---------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Start:
    """Open a stint at ``offset``."""

    offset: int
    #: Sequence ids the new writer inherits.
    inherited: dict[str, int]
    #: The stint this one continues, to record (None: a new log).
    previous: dict[str, Any] | None
    #: A sentence for the log line.
    note: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Another broker's stint is open: its end must be recorded first."""

    state: LogState
    reason: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """The records contradict each other: the topic must not be served."""

    reason: str


OpenDecision = Start | Wait | Refuse


def decide_open(
    view: LogView,
    *,
    me: str,
    incarnation: int | None,
    uploaded_end: int | None = None,
    local_end: int | None = None,
) -> OpenDecision:
    """Where broker ``me`` may open the topic's log, or why it must wait.

    ``uploaded_end``: where object storage's descriptors end (None: none, or not known);
    ``local_end``: where this broker's own WAL directory for the topic ends, when it holds one
    of the same incarnation (None: no local log).
    """
    known = [o for o in (view.checkpoint, uploaded_end) if o is not None]
    uploaded = max(known) if known else None
    state = view.state
    if state is None or not state.matches(incarnation):
        start = uploaded or 0
        note = "a new log" if start == 0 else f"continuing after what object storage holds (offset {start})"
        return Start(start, {}, None, note)
    if not state.open:
        end = state.next_offset
        assert end is not None
        if uploaded is not None and uploaded > end:
            return Refuse(
                f"object storage holds offsets up to {uploaded - 1}, but broker {state.writer}'s log was "
                f"recorded as ending at {end} ({state.closed_by}): two histories"
            )
        return Start(
            end,
            dict(state.producer_sequences),
            state.summary(),
            f"continuing where broker {state.writer}'s log ended ({state.closed_by})",
        )
    if state.writer == me and local_end is not None and local_end >= max(state.start_offset, uploaded or 0):
        # Our own earlier stint (a restart, or a reload): we hold the directory's lock, so no
        # earlier process of ours writes it any more, and our disk holds its true end.
        return Start(
            local_end,
            dict(state.producer_sequences),
            state.summary(next_offset=local_end, closed_by="writer_restart"),
            f"continuing this broker's own log (offset {local_end})",
        )
    if state.cloud_acks:
        # Its writer acked only what was uploaded: the checkpoint bounds every acknowledged offset
        # (an upload after this open fails its fence, so nothing it acks later is missed).
        end = max(uploaded or 0, state.start_offset)
        return Start(
            end,
            dict(state.producer_sequences),
            state.summary(next_offset=end, closed_by="cloud"),
            f"a cloud topic: continuing after what object storage holds (offset {end})",
        )
    return Wait(
        state,
        f"broker {state.writer} wrote the log from offset {state.start_offset} (epoch {state.epoch}) and its end "
        "is not recorded yet",
    )


def upload_bound(state: LogState | None, *, me: str, incarnation: int | None) -> int | None:
    """Exclusive bound of the offsets broker ``me``'s disk may contribute to object storage
    (None: nothing at all). A directory of another incarnation contributes nothing; the
    current writer's own open log is unbounded; otherwise only what ended before the current
    stint (or, for our own closed stint, before its recorded end) is history."""
    if state is None or incarnation is None or not state.matches(incarnation):
        return None
    if state.writer == me:
        if state.open:
            return UNBOUNDED
        assert state.next_offset is not None
        return state.next_offset
    return state.start_offset


def forced_end(view: LogView, *, uploaded_end: int | None = None) -> tuple[int, AcceptedGap | None]:
    """Where an unclean takeover of ``view``'s open stint continues, and the offsets it gives up.

    It continues at the writer's reservation (no offset it may have acknowledged is reused); what
    object storage does not hold of the stint, up to there, is the accepted gap."""
    state = view.state
    if state is None or not state.open:
        raise FailedPrecondition("the topic's log is not held by an unreachable writer: nothing to force")
    res = view.reservation
    if res is None or not res.belongs_to(state):
        raise HistoryConflict(
            f"the log record names broker {state.writer} (epoch {state.epoch}, from offset {state.start_offset}) "
            "but no offset reservation of that writer is recorded, so the offsets it may have acknowledged are "
            "unknown: refusing an unclean takeover"
        )
    known = [o for o in (view.checkpoint, uploaded_end) if o is not None]
    uploaded = max(known) if known else 0
    end = max(res.reserved_to, uploaded, state.start_offset)
    lost_from = max(uploaded, state.start_offset)
    gap = AcceptedGap(lost_from, end, writer=state.writer) if lost_from < end else None
    return end, gap


# ---------------------------------------------------------------------- transactions


def _fence(key: str, revision: int) -> Compare:
    return Compare.absent(key) if revision == 0 else Compare.mod_revision_is(key, revision)


class LogRecords:
    """Reads and fenced writes of topics' log records."""

    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self.store = store
        self.keys = keys

    async def read(self, topic: TopicName, *, incarnation: int | None = None) -> LogView:
        """The record, reservation and checkpoint in one consistent read."""
        k = self.keys
        res = await self.store.txn(
            [],
            [
                Op.get(k.storage_state(topic)),
                Op.get(k.storage_reservation(topic)),
                Op.get(k.upload_checkpoint(topic)),
            ],
        )
        state_kv, res_kv, cp_kv = res.gets
        return LogView(
            state=LogState.from_kv(state_kv) if state_kv is not None else None,
            reservation=Reservation.from_kv(res_kv) if res_kv is not None else None,
            checkpoint=checkpoint_of(cp_kv.json(), incarnation) if cp_kv is not None else None,
            state_revision=state_kv.mod_revision if state_kv is not None else 0,
            reservation_revision=res_kv.mod_revision if res_kv is not None else 0,
            checkpoint_revision=cp_kv.mod_revision if cp_kv is not None else 0,
        )

    async def state(self, topic: TopicName) -> LogState | None:
        kv = await self.store.get(self.keys.storage_state(topic))
        return LogState.from_kv(kv) if kv is not None else None

    async def open_stint(
        self,
        topic: TopicName,
        view: LogView,
        start: Start,
        *,
        writer: str,
        epoch: int,
        incarnation: int | None,
        reserve: int,
        cloud_acks: bool = False,
        owner_fence: Sequence[Compare] = (),
    ) -> tuple[LogState, Reservation] | None:
        """Record that ``writer`` writes the log from ``start.offset``; None if anything read in
        ``view`` changed (or ``owner_fence`` failed): read again and decide again.

        The first stint of a log (``start.previous`` None) also sets the upload checkpoint to its
        start when there is none of this incarnation: from then on the checkpoint says where the
        history's uploads stand, so no uploader ever takes its own first local offset for the
        history's start. Without it, a later writer's uploader whose segment sealed before the
        first writer's uploader shipped that writer's log would describe its range first and move
        the checkpoint past offsets nobody uploaded yet (found by the fault scenario
        ``etcd_restart_during_takeover``)."""
        k = self.keys
        state = LogState(
            writer=writer,
            epoch=epoch,
            start_offset=start.offset,
            incarnation=incarnation,
            producer_sequences=merge_sequences(start.inherited),
            opened_at_ms=now_ms(),
            previous=start.previous,
            cloud_acks=cloud_acks,
        )
        reservation = Reservation(start.offset + max(1, reserve), writer, epoch, start.offset)
        res = await self.store.txn(
            [
                *owner_fence,
                _fence(k.storage_state(topic), view.state_revision),
                _fence(k.storage_reservation(topic), view.reservation_revision),
                _fence(k.upload_checkpoint(topic), view.checkpoint_revision),
            ],
            [
                Op.put(k.storage_state(topic), state.to_json()),
                Op.put(k.storage_reservation(topic), reservation.to_json()),
                *(
                    [
                        Op.put(
                            k.upload_checkpoint(topic),
                            checkpoint_value(start.offset, broker_id=writer, incarnation=incarnation),
                        )
                    ]
                    if start.previous is None and view.checkpoint is None
                    else []
                ),
            ],
        )
        if not res.succeeded:
            return None
        return replace(state, revision=res.revision), replace(reservation, revision=res.revision)

    async def extend_reservation(
        self, topic: TopicName, stint: LogState, reservation: Reservation, reserved_to: int
    ) -> Reservation | None:
        """Move the stint's reservation up to ``reserved_to`` (None: the stint is no longer open
        as recorded: the writer must stop)."""
        k = self.keys
        new = replace(reservation, reserved_to=reserved_to)
        res = await self.store.txn(
            [
                Compare.mod_revision_is(k.storage_state(topic), stint.revision),
                Compare.mod_revision_is(k.storage_reservation(topic), reservation.revision),
            ],
            [Op.put(k.storage_reservation(topic), new.to_json())],
        )
        return replace(new, revision=res.revision) if res.succeeded else None

    def close_txn(
        self,
        topic: TopicName,
        stint: LogState,
        *,
        next_offset: int,
        closed_by: str,
        sequences: Mapping[str, int] | None = None,
        detail: str = "",
    ) -> tuple[list[Compare], list[Op]]:
        """The compare and the put that close ``stint`` at ``next_offset`` (to join another
        transaction, e.g. a hand-over's)."""
        if next_offset < stint.start_offset:
            raise HistoryConflict(
                f"topic {topic}: closing broker {stint.writer}'s log at {next_offset}, before its start "
                f"{stint.start_offset}"
            )
        key = self.keys.storage_state(topic)
        closed = stint.closed(next_offset, closed_by, sequences=sequences, detail=detail)
        return [Compare.mod_revision_is(key, stint.revision)], [Op.put(key, closed.to_json())]

    async def close(
        self,
        topic: TopicName,
        stint: LogState,
        *,
        next_offset: int,
        closed_by: str,
        sequences: Mapping[str, int] | None = None,
        detail: str = "",
        fence: Sequence[Compare] = (),
    ) -> bool:
        """Close ``stint`` at ``next_offset`` unless the record changed since it was read."""
        compares, ops = self.close_txn(
            topic, stint, next_offset=next_offset, closed_by=closed_by, sequences=sequences, detail=detail
        )
        res = await self.store.txn([*fence, *compares], ops)
        return res.succeeded

    async def force_close(
        self, topic: TopicName, *, decided_by: str, reason: str, incarnation: int | None = None
    ) -> tuple[LogState, AcceptedGap | None]:
        """End an unreachable writer's stint at its reservation, recording the accepted gap.

        Raises FailedPrecondition when there is no open stint to force, HistoryConflict when the
        writer's reservation is unknown; retries (a few times) when the records change meanwhile."""
        k = self.keys
        for _ in range(5):
            view = await self.read(topic, incarnation=incarnation)
            end, gap = forced_end(view)
            state = view.state
            assert state is not None
            detail = f"{decided_by}: {reason}" if reason else decided_by
            closed = state.closed(end, "forced", detail=detail)
            ops = [Op.put(k.storage_state(topic), closed.to_json())]
            if gap is not None:
                gap = replace(gap, reason=reason, decided_by=decided_by, at_ms=now_ms())
                ops.append(Op.put(k.storage_gap(topic, gap.start_offset), gap.to_json()))
            res = await self.store.txn(
                [
                    _fence(k.storage_state(topic), view.state_revision),
                    _fence(k.storage_reservation(topic), view.reservation_revision),
                    _fence(k.upload_checkpoint(topic), view.checkpoint_revision),
                ],
                ops,
            )
            if res.succeeded:
                return replace(closed, revision=res.revision), gap
        raise HistoryConflict(f"topic {topic}: the log record kept changing while forcing a takeover; retry")

    async def gaps(self, topic: TopicName) -> list[AcceptedGap]:
        kvs, _ = await self.store.get_prefix(self.keys.storage_gaps_prefix(topic))
        out = []
        for kv in kvs:
            try:
                out.append(AcceptedGap.from_json(kv.json()))
            except (KeyError, TypeError, ValueError):
                continue
        return sorted(out, key=lambda g: g.start_offset)
