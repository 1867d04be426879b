"""Operation histories of reliable topics, and a checker that says exactly what went wrong.

In the spirit of Jepsen/Elle: a fault test runs producers and consumers against a cluster while
it injects faults, records every operation in a :class:`History`, reads every topic once more at
the end with a fresh subscription (the *final read*), and hands both to :func:`check`, a pure
function that returns a :class:`Verdict`. Nothing here does I/O except the dump/load helpers.

The model
---------

- A message's identity is a :class:`MsgId` ``(producer, seq)``; the payload carries it
  (:func:`encode_payload` / :func:`decode_payload`). A payload that does not decode as ours (wrong
  magic, bad checksum, torn) decodes to ``None``, and is a phantom wherever it shows up.
- An :class:`Event` is one step of one process. Sends have an ``invoke`` and then one outcome,
  in Jepsen's terms: ``ok`` (acknowledged, with the offset the broker reported), ``fail`` (it
  definitely did not happen: the broker refused it before storing anything) or ``info`` (the
  outcome is unknown: a timeout, a lost connection; it may or may not have been stored). A send
  with no outcome at all (the recorder stopped first) counts as ``info`` ("unresolved").
  Deliveries (``deliver``) and acknowledgements (``ack``) are single ``ok`` events; an ``ack``
  means the client accepted it (the SDK buffers acks: durability is what ``cursor`` samples
  show). A ``cursor`` event is a sampled *committed* cursor of one subscription: every offset
  ``<=`` the cursor is durably acknowledged.
- The final read of a topic is a list of ``(offset, MsgId | None)`` in delivery order, as a new
  exclusive subscription starting at ``earliest`` received them, after the faults. It is the
  ground truth of what the topic stores. Offsets start at 0 (a topic's first offset); a topic
  whose start was cut by retention needs an allowed gap ``(0, first_kept)``.
- Allowed gaps are half-open offset ranges ``[start, end)`` whose loss an operator accepted
  (say, a broker's disk was destroyed with ``durability=none``). The final read may skip them,
  and acknowledged messages stored there count as "lost in an allowed gap", not as violations.

The invariants (each violation kind is a stable name, see :data:`VIOLATION_KINDS`)
----------------------------------------------------------------------------------

1. ``lost``: every acknowledged send (phase ``ok``) appears in the final read of its topic,
   unless its acked offset lies in an allowed gap (for a send acknowledged without an offset, a
   duplicate whose original offset the broker did not know: the offsets it was delivered at).
2. ``offset-mismatch``: a send acknowledged with offset ``o`` is found *at* ``o`` in the final
   read. A different message at ``o`` is a forked history (a new owner reused offsets); the
   message found only elsewhere while ``o`` is absent means the ack lied about where it went.
   (When the message is gone entirely and ``o`` is simply absent, that is only ``lost``.)
3. ``phantom``: every delivered or finally read message was invoked as a send on that topic.
   Undecodable payloads are phantoms; so is a message whose every send failed *definitely*.
   Sends with an unknown outcome may appear or not.
4. ``reorder``: for one producer on one topic, acked offsets increase with ``seq``; and in the
   final read the *first* occurrence of each of its messages comes in increasing ``seq`` order.
   (The SDK retries a batch refused with a *retryable* error, e.g. ``DISK_FULL``, after the
   batches already on the wire behind it: a test injecting such refusals should expect
   ``reorder`` and assert on the other kinds of ``Verdict.by_kind``.)
5. ``offset-order`` / ``gap`` / ``conflict``: final-read offsets increase strictly and are
   contiguous from 0, except where the skipped offsets lie inside allowed gaps; and every offset
   observed anywhere (send acks, deliveries, acks, the final read) holds one single message.
6. ``duplicate``: a message stored at two offsets in the final read. A violation when the
   producers are idempotent (``idempotent=True``), else only counted. Redeliveries (one offset
   delivered more than once to one subscription) are at-least-once and only counted.
7. ``cursor-regression`` / ``delivery-after-ack``: per (topic, subscription), sampled cursors
   never decrease; and no offset ``<=`` a sampled cursor is delivered to that subscription
   after the sample was taken. Caveat: a consumer records a delivery when its application takes
   the message out of the SDK's receive queue; a redelivery buffered there before another
   consumer's ack made the cursor pass it would look like a violation. Samplers should keep
   receive queues small or sample only when consumers are idle, and sample the durable cursor
   (etcd), not the in-memory one ``topics stats`` shows (see tests/fault/workload.py).

One fault often shows under several kinds (a forked topic is ``lost`` + ``offset-mismatch`` +
``conflict``): read the most specific one first. The verdict also carries counts and the
longest pause between successful send acks (overall and per topic), which is how failover
pauses are measured.

The checker builds dicts and sets in a few linear passes (plus sorts): 100k+ events check in
well under a second.
"""

from __future__ import annotations

import bisect
import itertools
import json
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["send", "deliver", "ack", "cursor"]
Phase = Literal["invoke", "ok", "fail", "info"]

KINDS: tuple[str, ...] = ("send", "deliver", "ack", "cursor")
PHASES: tuple[str, ...] = ("invoke", "ok", "fail", "info")
#: The offset a broker reports for a re-sent duplicate whose original offset it no longer knows.
UNKNOWN_OFFSET = 2**64 - 1

#: Every violation kind :func:`check` reports, in the order the summary lists them.
VIOLATION_KINDS: tuple[str, ...] = (
    "lost",
    "offset-mismatch",
    "phantom",
    "reorder",
    "offset-order",
    "gap",
    "conflict",
    "duplicate",
    "cursor-regression",
    "delivery-after-ack",
)

#: The process name :meth:`History.cursor` records samples under.
CURSOR_SAMPLER = "cursor-sampler"

FinalReads = Mapping[str, Sequence[tuple[int, "MsgId | None"]]]
AllowedGaps = Mapping[str, Sequence[tuple[int, int]]]


# ---------------------------------------------------------------------------------- identity


@dataclass(frozen=True, order=True, slots=True)
class MsgId:
    """Who sent a message and its sequence number there (unique per producer process)."""

    producer: str
    seq: int

    def __str__(self) -> str:
        return f"{self.producer}#{self.seq}"


_MAGIC = b"dh1|"
_PAD = b"."


def encode_payload(msg_id: MsgId, pad_to: int = 0) -> bytes:
    """The payload carrying ``msg_id``: ``dh1|<crc32 hex>|<seq>|<producer>|`` then ``.`` up to
    ``pad_to`` bytes. The CRC covers ``<seq>|<producer>``, so a corrupted payload decodes to
    None rather than to another message."""
    if not msg_id.producer or msg_id.seq < 0:
        raise ValueError(f"a message id needs a producer name and a seq >= 0, got {msg_id!r}")
    body = f"{msg_id.seq}|{msg_id.producer}".encode()
    head = b"%s%08x|%s|" % (_MAGIC, zlib.crc32(body), body)
    return head + _PAD * (pad_to - len(head)) if pad_to > len(head) else head


def decode_payload(payload: bytes) -> MsgId | None:
    """The :class:`MsgId` in ``payload``, or None if it is not a payload we made (a phantom)."""
    if not payload.startswith(_MAGIC):
        return None
    end = payload.rfind(b"|")
    if end < len(_MAGIC) or payload.count(_PAD, end + 1) != len(payload) - end - 1:
        return None
    parts = payload[len(_MAGIC) : end].split(b"|", 2)
    if len(parts) != 3:
        return None
    crc, seq, producer = parts
    body = payload[len(_MAGIC) + len(crc) + 1 : end]
    try:
        if int(crc, 16) != zlib.crc32(body) or not seq.isdigit() or not producer:
            return None
        return MsgId(producer.decode(), int(seq))
    except (ValueError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One step of one process (see the module docstring for kinds and phases)."""

    process: str
    kind: Kind
    phase: Phase
    topic: str
    msg: MsgId | None
    offset: int | None
    subscription: str | None
    time: float
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "process": self.process,
            "kind": self.kind,
            "phase": self.phase,
            "topic": self.topic,
            "msg": None if self.msg is None else [self.msg.producer, self.msg.seq],
            "offset": self.offset,
            "subscription": self.subscription,
            "time": self.time,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Event:
        msg = obj.get("msg")
        kind, phase = obj["kind"], obj["phase"]
        if kind not in KINDS or phase not in PHASES:
            raise ValueError(f"unknown event kind/phase {kind!r}/{phase!r}; allowed: {KINDS} / {PHASES}")
        return cls(
            process=obj["process"],
            kind=kind,
            phase=phase,
            topic=obj["topic"],
            msg=None if msg is None else MsgId(msg[0], int(msg[1])),
            offset=obj.get("offset"),
            subscription=obj.get("subscription"),
            time=float(obj["time"]),
            detail=obj.get("detail", ""),
        )


class History:
    """An append-only record of events.

    Made for asyncio code, and safe to append to from threads as well: each append (and the time
    it records, from ``clock``) happens under one lock, so events are in time order.
    ``send_invoked`` returns a handle that ``send_ok``/``send_failed`` complete exactly once.
    """

    def __init__(self, events: Iterable[Event] = (), *, clock: Callable[[], float] = time.monotonic) -> None:
        self._events: list[Event] = list(events)
        self._clock = clock
        self._lock = threading.Lock()
        #: Handles (indexes of invoke events) still waiting for an outcome.
        self._open: set[int] = set()

    # -------------------------------------------------------------------- reading

    @property
    def events(self) -> list[Event]:
        """A snapshot of the events so far."""
        with self._lock:
            return list(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def count(self, kind: Kind, phase: Phase | None = None, topic: str | None = None) -> int:
        """How many events of ``kind`` (and ``phase``, ``topic`` when given) were recorded."""
        return sum(
            1
            for e in self.events
            if e.kind == kind and (phase is None or e.phase == phase) and (topic is None or e.topic == topic)
        )

    @property
    def unresolved_sends(self) -> int:
        """Sends invoked through this recorder that have no outcome yet."""
        with self._lock:
            return len(self._open)

    # -------------------------------------------------------------------- recording

    def _record(
        self,
        process: str,
        kind: Kind,
        phase: Phase,
        topic: str,
        *,
        msg: MsgId | None = None,
        offset: int | None = None,
        subscription: str | None = None,
        detail: str = "",
        completes: int | None = None,
    ) -> int:
        """Append one event stamped with the clock, under the lock; return its index (the
        handle of a send invoke). ``completes``: the send handle this outcome closes."""
        with self._lock:
            if completes is not None:
                if completes not in self._open:
                    raise ValueError(f"send handle {completes} is unknown or already has an outcome")
                self._open.discard(completes)
            handle = len(self._events)
            self._events.append(
                Event(
                    process=process,
                    kind=kind,
                    phase=phase,
                    topic=topic,
                    msg=msg,
                    offset=offset,
                    subscription=subscription,
                    time=self._clock(),
                    detail=detail,
                )
            )
            if kind == "send" and phase == "invoke":
                self._open.add(handle)
            return handle

    def send_invoked(self, process: str, topic: str, msg: MsgId, *, detail: str = "") -> int:
        """Record that ``process`` is about to send ``msg`` to ``topic``; return the handle."""
        return self._record(process, "send", "invoke", topic, msg=msg, detail=detail)

    def send_ok(self, handle: int, offset: int | None, *, detail: str = "") -> None:
        """The send ``handle`` was acknowledged at ``offset``. A broker acknowledges a re-sent
        duplicate whose original offset it no longer knows with UNKNOWN_OFFSET (2**64 - 1):
        recorded without an offset (the message must still be found; where is not checked)."""
        if offset is None or offset == UNKNOWN_OFFSET:
            self._complete(
                handle, "ok", None, detail or "acknowledged as a duplicate, original offset unknown"
            )
            return
        self._complete(handle, "ok", offset, detail)

    def send_failed(self, handle: int, error: BaseException | str, *, definite: bool) -> None:
        """The send ``handle`` failed: ``definite`` when nothing of it can have been stored
        (recorded as ``fail``), else its outcome is unknown (recorded as ``info``)."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._complete(handle, "fail" if definite else "info", None, text)

    def _complete(self, handle: int, phase: Phase, offset: int | None, detail: str) -> None:
        try:
            inv = self._events[handle]
        except IndexError:
            raise ValueError(f"send handle {handle} is unknown") from None
        self._record(
            inv.process, "send", phase, inv.topic, msg=inv.msg, offset=offset, detail=detail, completes=handle
        )

    def delivered(
        self,
        process: str,
        topic: str,
        subscription: str,
        msg: MsgId | None,
        offset: int,
        redelivery: bool = False,
        *,
        detail: str = "",
    ) -> None:
        """``process`` received ``msg`` (None: undecodable) at ``offset`` on ``subscription``.
        ``redelivery`` is what the client said (``Message.redelivery_count > 0``); the checker
        counts redeliveries from the offsets, the flag is kept in ``detail``."""
        if redelivery:
            detail = f"redelivery {detail}".rstrip()
        self._record(
            process, "deliver", "ok", topic, msg=msg, offset=offset, subscription=subscription, detail=detail
        )

    def acked(
        self, process: str, topic: str, subscription: str, offset: int, msg: MsgId | None, *, detail: str = ""
    ) -> None:
        """``process`` acknowledged ``offset`` (holding ``msg``) on ``subscription``."""
        self._record(
            process, "ack", "ok", topic, msg=msg, offset=offset, subscription=subscription, detail=detail
        )

    def cursor(self, topic: str, subscription: str, cursor: int, *, process: str = CURSOR_SAMPLER) -> None:
        """A sampled committed cursor: every offset ``<= cursor`` of ``subscription`` is acked."""
        self._record(process, "cursor", "ok", topic, offset=cursor, subscription=subscription)

    # -------------------------------------------------------------------- files

    def dump(self, path: str | Path) -> None:
        """Write the events as JSON lines (one event per line)."""
        with open(path, "w", encoding="utf-8") as f:
            for e in self.events:
                f.write(json.dumps(e.to_json(), separators=(",", ":")))
                f.write("\n")

    @classmethod
    def load(cls, path: str | Path) -> History:
        """Read a history written by :meth:`dump` (for checking; its sends cannot be completed)."""
        with open(path, encoding="utf-8") as f:
            return cls(Event.from_json(json.loads(line)) for line in f if line.strip())


def dump_final_reads(path: str | Path, final_reads: FinalReads) -> None:
    """Write final reads as one JSON object, so a failed run can be re-checked offline."""
    obj = {
        topic: [[off, None if m is None else [m.producer, m.seq]] for off, m in entries]
        for topic, entries in final_reads.items()
    }
    Path(path).write_text(json.dumps(obj), encoding="utf-8")


def load_final_reads(path: str | Path) -> dict[str, list[tuple[int, MsgId | None]]]:
    obj = json.loads(Path(path).read_text(encoding="utf-8"))
    return {
        topic: [(int(off), None if m is None else MsgId(m[0], int(m[1]))) for off, m in entries]
        for topic, entries in obj.items()
    }


# ---------------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Counts:
    sends_invoked: int = 0
    sends_ok: int = 0
    sends_failed: int = 0
    sends_info: int = 0
    #: Invoked sends with no recorded outcome (treated like ``info``).
    sends_unresolved: int = 0
    deliveries: int = 0
    #: Deliveries of an offset the same subscription had already received.
    redeliveries: int = 0
    #: Extra copies in the final reads (a message at n offsets counts n - 1).
    duplicates: int = 0
    #: Acknowledged messages missing from the final read whose offset is in an allowed gap.
    lost_in_allowed_gaps: int = 0
    cursor_samples: int = 0
    final_read: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    counts: Counts
    #: Violation kind -> one line per violation, with msg ids, offsets, processes and times.
    by_kind: dict[str, list[str]]
    #: The longest time between two consecutive successful send acks (any topic).
    longest_ack_gap_s: float
    #: The same, per topic.
    longest_ack_gap_s_per_topic: dict[str, float]
    #: When the longest gap happened: (start, end) in seconds since the history's first event.
    longest_ack_gap_at: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        return not any(self.by_kind.values())

    @property
    def violations(self) -> list[str]:
        return [f"{kind}: {line}" for kind in VIOLATION_KINDS for line in self.by_kind.get(kind, ())]

    def summary(self, examples: int = 10) -> str:
        """A compact human verdict: one line of counts, then each violated kind with examples."""
        c = self.counts
        n = len(self.violations)
        reads = " ".join(f"{t}={size}" for t, size in sorted(c.final_read.items())) or "-"
        gap = f"longest ack gap {self.longest_ack_gap_s:.3f}s"
        if self.longest_ack_gap_at is not None:
            gap += f" (t+{self.longest_ack_gap_at[0]:.3f}s..t+{self.longest_ack_gap_at[1]:.3f}s)"
        lines = [
            f"history check: {'OK' if self.ok else f'FAILED ({n} violations)'}",
            f"sends {c.sends_invoked} invoked: {c.sends_ok} ok, {c.sends_failed} failed, {c.sends_info} info, "
            f"{c.sends_unresolved} unresolved; deliveries {c.deliveries} ({c.redeliveries} redelivered); "
            f"final read {reads}; duplicates {c.duplicates}; lost in allowed gaps {c.lost_in_allowed_gaps}; "
            f"cursor samples {c.cursor_samples}; {gap}",
        ]
        for kind in VIOLATION_KINDS:
            found = self.by_kind.get(kind, [])
            if not found:
                continue
            lines.append(f"{kind} ({len(found)}):")
            lines += [f"  - {line}" for line in found[:examples]]
            if len(found) > examples:
                lines.append(f"  ... and {len(found) - examples} more")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- checker


class _Send:
    """Every invocation of one message on one topic, and their outcomes."""

    __slots__ = ("fail_detail", "fails", "first", "invokes", "oks", "open")

    def __init__(self, first: Event) -> None:
        self.first = first  # the first invoke
        self.invokes = 0
        self.open = 0  # invokes still waiting for their outcome
        self.oks: list[Event] = []
        self.fails = 0
        self.fail_detail = ""

    @property
    def definitely_failed(self) -> bool:
        return self.invokes > 0 and self.fails == self.invokes


class _Read:
    """One topic's final read, indexed."""

    __slots__ = ("_described", "at", "entries", "where")

    def __init__(self, entries: Sequence[tuple[int, MsgId | None]]) -> None:
        self.entries = entries
        self._described: str | None = None
        #: offset -> the message first read there
        self.at: dict[int, MsgId | None] = {}
        #: message -> the distinct offsets it was read at, in read order
        self.where: dict[MsgId, list[int]] = {}
        for off, msg in entries:
            if off not in self.at:
                self.at[off] = msg
            if msg is not None:
                offs = self.where.setdefault(msg, [])
                if off not in offs:
                    offs.append(off)

    def describe(self) -> str:
        if self._described is None:
            if not self.entries:
                self._described = "the final read is empty"
            else:
                offs = [off for off, _ in self.entries]
                self._described = f"final read has {len(offs)} messages, offsets {min(offs)}..{max(offs)}"
        return self._described


class _Gaps:
    """Allowed gaps of one topic, merged into disjoint sorted ranges."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        merged: list[list[int]] = []
        for start, end in sorted((int(a), int(b)) for a, b in ranges):
            if end <= start:
                raise ValueError(
                    f"an allowed gap is a half-open range [start, end) with end > start: {start, end}"
                )
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = [a for a, _ in merged]
        self._ends = [b for _, b in merged]

    def covers(self, offset: int) -> bool:
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def covers_range(self, start: int, end: int) -> bool:
        """Is every offset of ``[start, end)`` inside one allowed gap?"""
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and end <= self._ends[i]


_NO_GAPS = _Gaps()


class _Report:
    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.by_kind: dict[str, list[str]] = {kind: [] for kind in VIOLATION_KINDS}

    def add(self, kind: str, line: str) -> None:
        self.by_kind[kind].append(line)

    def t(self, when: float) -> str:
        return f"t+{when - self.t0:.3f}s"

    def ev(self, e: Event) -> str:
        """Who and when, for one event."""
        sub = f" on {e.subscription}" if e.subscription else ""
        return f"{e.process}{sub} at {self.t(e.time)}"


def check(
    history: History | Iterable[Event],
    *,
    final_reads: FinalReads,
    allowed_gaps: AllowedGaps | None = None,
    idempotent: bool = True,
) -> Verdict:
    """Check ``history`` against the final reads; see the module docstring for the invariants.

    ``final_reads`` needs an entry for every topic with an acknowledged send (an empty list is
    an answer; a missing topic is a mistake in the test, raised as ValueError).
    """
    events = history.events if isinstance(history, History) else list(history)
    missing = sorted({e.topic for e in events if e.kind == "send" and e.phase == "ok"} - set(final_reads))
    if missing:
        raise ValueError(f"final_reads has no entry for topics with acknowledged sends: {missing}")
    report = _Report(min((e.time for e in events), default=0.0))
    gaps = {topic: _Gaps(ranges) for topic, ranges in (allowed_gaps or {}).items()}
    sends, send_counts = _index_sends(events)
    reads = {topic: _Read(entries) for topic, entries in final_reads.items()}

    lost_in_gaps = _check_acked(sends, reads, gaps, report, delivered_offsets(events))
    _check_phantoms(events, sends, final_reads, report)
    _check_producer_order(sends, final_reads, report)
    _check_offsets(final_reads, gaps, report)
    _check_conflicts(events, final_reads, report)
    duplicates = _check_duplicates(sends, reads, idempotent, report)
    deliveries, redeliveries = _count_deliveries(events)
    cursor_samples = _check_cursors(events, report)
    longest, per_topic, at = _ack_gaps(events, report.t0)

    resolved = send_counts["ok"] + send_counts["fail"] + send_counts["info"]
    counts = Counts(
        sends_invoked=send_counts["invoke"],
        sends_ok=send_counts["ok"],
        sends_failed=send_counts["fail"],
        sends_info=send_counts["info"],
        sends_unresolved=send_counts["invoke"] - resolved,
        deliveries=deliveries,
        redeliveries=redeliveries,
        duplicates=duplicates,
        lost_in_allowed_gaps=lost_in_gaps,
        cursor_samples=cursor_samples,
        final_read={topic: len(entries) for topic, entries in final_reads.items()},
    )
    by_kind = {kind: lines for kind, lines in report.by_kind.items() if lines}
    return Verdict(counts, by_kind, longest, per_topic, at)


def _index_sends(events: Sequence[Event]) -> tuple[dict[tuple[str, MsgId], _Send], dict[str, int]]:
    """Group send events by (topic, msg), pairing each outcome with an open invoke of the same
    message (a malformed history, e.g. an outcome without an invoke, raises ValueError)."""
    sends: dict[tuple[str, MsgId], _Send] = {}
    counts = dict.fromkeys(PHASES, 0)
    for e in events:
        if e.kind != "send":
            continue
        if e.msg is None:
            raise ValueError(f"a send event without a message id: {e}")
        phase = e.phase
        counts[phase] += 1
        key = (e.topic, e.msg)
        s = sends.get(key)
        if phase == "invoke":
            if s is None:
                s = sends[key] = _Send(e)
            s.invokes += 1
            s.open += 1
            continue
        if s is None or s.open <= 0:
            raise ValueError(f"a send outcome with no open invoke: {e}")
        s.open -= 1
        if phase == "ok":
            s.oks.append(e)
        elif phase == "fail":
            s.fails += 1
            s.fail_detail = s.fail_detail or e.detail
    return sends, counts


def delivered_offsets(events: Iterable[Event]) -> dict[tuple[str, MsgId], set[int]]:
    """Where each message was delivered, per topic (any subscription)."""
    out: dict[tuple[str, MsgId], set[int]] = defaultdict(set)
    for e in events:
        if e.kind == "deliver" and e.msg is not None and e.offset is not None:
            out[(e.topic, e.msg)].add(e.offset)
    return out


def _check_acked(
    sends: dict[tuple[str, MsgId], _Send],
    reads: dict[str, _Read],
    gaps: dict[str, _Gaps],
    report: _Report,
    delivered_at: Mapping[tuple[str, MsgId], set[int]],
) -> int:
    """Invariants 1 (lost) and 2 (offset-mismatch). Returns the losses inside allowed gaps."""
    lost_in_gaps = 0
    for (topic, msg), s in sends.items():
        if not s.oks:
            continue
        read = reads[topic]
        topic_gaps = gaps.get(topic, _NO_GAPS)
        found = read.where.get(msg)
        if found is None:
            acked_at = [ok.offset for ok in s.oks if ok.offset is not None] or sorted(
                delivered_at.get((topic, msg), ())
            )
            if acked_at and all(topic_gaps.covers(off) for off in acked_at):
                lost_in_gaps += 1
            else:
                ok = s.oks[0]
                report.add(
                    "lost",
                    f"{msg} on {topic}: invoked by {report.ev(s.first)}, acked at offset {ok.offset} "
                    f"at {report.t(ok.time)}; not in the final read ({read.describe()})",
                )
        for ok in s.oks:
            off = ok.offset
            if off is None:  # acknowledged as a duplicate whose original offset was not known
                continue
            if off in read.at:
                other = read.at[off]
                if other != msg:
                    report.add(
                        "offset-mismatch",
                        f"{topic}@{off}: acked to {report.ev(ok)} for {msg}, but the final read has "
                        f"{_name(other)} there (forked history: the offset was reused)"
                        + ("" if found is None else f"; {msg} was read at {found}"),
                    )
            elif found is not None and not topic_gaps.covers(off):
                report.add(
                    "offset-mismatch",
                    f"{msg} on {topic}: acked at offset {off} ({report.ev(ok)}), but offset {off} is not "
                    f"in the final read and {msg} was read at {found}",
                )
    return lost_in_gaps


def _check_phantoms(
    events: Sequence[Event], sends: dict[tuple[str, MsgId], _Send], final_reads: FinalReads, report: _Report
) -> None:
    """Invariant 3: every delivered or read message was sent (and not definitely refused)."""
    # (why, topic, msg or offset) -> [first sighting, number of sightings, offsets]
    found: dict[tuple[str, str, object], list[Any]] = {}

    def sighting(topic: str, msg: MsgId | None, offset: int | None, where: Event | None) -> None:
        if msg is None:
            key: tuple[str, str, object] = ("an undecodable payload", topic, offset)
        else:
            s = sends.get((topic, msg))
            if s is None:
                key = (f"{msg}, never sent to this topic", topic, msg)
            elif s.definitely_failed:
                key = (f"{msg}, whose send failed definitely ({s.fail_detail})", topic, msg)
            else:
                return
        entry = found.get(key)
        if entry is None:
            found[key] = [where, 1, {offset}]
        else:
            entry[1] += 1
            entry[2].add(offset)

    for e in events:
        if e.kind == "deliver":
            sighting(e.topic, e.msg, e.offset, e)
    for topic, entries in final_reads.items():
        for off, msg in entries:
            sighting(topic, msg, off, None)
    for (why, topic, _), (first, n, offsets) in found.items():
        offs = sorted(o for o in offsets if o is not None)
        where = "in the final read" if first is None else f"delivered to {report.ev(first)}"
        report.add("phantom", f"{why}: on {topic} at offsets {offs}, first {where}; seen {n} time(s)")


def _check_producer_order(
    sends: dict[tuple[str, MsgId], _Send], final_reads: FinalReads, report: _Report
) -> None:
    """Invariant 4: per producer and topic, acked offsets and first reads follow seq order."""
    acked: dict[tuple[str, str], list[tuple[int, int, Event]]] = defaultdict(list)
    for (topic, msg), s in sends.items():
        for ok in s.oks:
            if ok.offset is not None:
                acked[(topic, msg.producer)].append((msg.seq, ok.offset, ok))
    for (topic, producer), items in acked.items():
        items.sort(key=lambda x: (x[0], x[1]))
        top: tuple[int, int, Event] | None = None  # the acked send with the highest offset so far
        for item in items:
            seq, off, ok = item
            if top is not None and seq != top[0] and off <= top[1]:
                report.add(
                    "reorder",
                    f"{producer} on {topic}: {MsgId(producer, seq)} acked at offset {off} "
                    f"({report.t(ok.time)}), not after {MsgId(producer, top[0])} acked at offset {top[1]} "
                    f"({report.t(top[2].time)})",
                )
            if top is None or off > top[1]:
                top = item
    for topic, entries in final_reads.items():
        seen: set[MsgId] = set()
        highest: dict[str, tuple[int, int]] = {}  # producer -> (seq, offset) of the highest first read
        for off, read in entries:
            if read is None or read in seen:
                continue
            seen.add(read)
            prev = highest.get(read.producer)
            if prev is not None and read.seq < prev[0]:
                report.add(
                    "reorder",
                    f"final read of {topic}: {read} first appears at offset {off}, after "
                    f"{MsgId(read.producer, prev[0])} at offset {prev[1]}",
                )
            elif prev is None or read.seq > prev[0]:
                highest[read.producer] = (read.seq, off)


def _check_offsets(final_reads: FinalReads, gaps: dict[str, _Gaps], report: _Report) -> None:
    """Invariant 5, first half: final-read offsets increase by one, from 0, except across
    allowed gaps."""
    for topic, entries in final_reads.items():
        topic_gaps = gaps.get(topic, _NO_GAPS)
        prev: int | None = None
        for off, msg in entries:
            if prev is not None and off <= prev:
                report.add(
                    "offset-order",
                    f"final read of {topic}: offset {off} ({_name(msg)}) read after offset {prev}",
                )
                continue
            expected = 0 if prev is None else prev + 1
            if off > expected and not topic_gaps.covers_range(expected, off):
                report.add(
                    "gap",
                    f"final read of {topic}: offsets {expected}..{off - 1} missing "
                    f"({off - expected} offsets, before {_name(msg)} at {off})",
                )
            prev = off


def _check_conflicts(events: Sequence[Event], final_reads: FinalReads, report: _Report) -> None:
    """Invariant 5, second half: each (topic, offset) ever observed holds one message."""
    first: dict[str, dict[int, tuple[MsgId | None, Event | None]]] = defaultdict(dict)
    clashes: dict[tuple[str, int], dict[MsgId | None, Event | None]] = {}
    observed = (
        (e.topic, e.offset, e.msg, e)
        for e in events
        if e.offset is not None and (e.kind in ("deliver", "ack") or (e.kind == "send" and e.phase == "ok"))
    )
    from_reads = ((topic, off, msg, None) for topic, entries in final_reads.items() for off, msg in entries)
    for topic, off, msg, source in itertools.chain(observed, from_reads):
        seen = first[topic]
        prior = seen.get(off)
        if prior is None:
            seen[off] = (msg, source)
        elif prior[0] is not msg and prior[0] != msg:
            clash = clashes.setdefault((topic, off), {prior[0]: prior[1]})
            clash.setdefault(msg, source)
    for (topic, off), msgs in clashes.items():
        parts = [f"{_name(msg)} ({_source(src, report)})" for msg, src in msgs.items()]
        report.add("conflict", f"{topic}@{off} holds {len(msgs)} different messages: " + "; ".join(parts))


def _source(e: Event | None, report: _Report) -> str:
    if e is None:
        return "final read"
    what = {"send": "send ack to", "deliver": "delivered to", "ack": "acked by"}[e.kind]
    return f"{what} {report.ev(e)}"


def _check_duplicates(
    sends: dict[tuple[str, MsgId], _Send], reads: dict[str, _Read], idempotent: bool, report: _Report
) -> int:
    """Invariant 6: a message stored at several offsets (a violation for idempotent producers)."""
    duplicates = 0
    for topic, read in reads.items():
        for msg, offs in read.where.items():
            if len(offs) < 2:
                continue
            duplicates += len(offs) - 1
            if idempotent:
                s = sends.get((topic, msg))
                acked = [ok.offset for ok in s.oks] if s is not None else []
                report.add(
                    "duplicate",
                    f"{msg} on {topic} stored at offsets {offs} (acked at {acked or 'none'})",
                )
    return duplicates


def _count_deliveries(events: Sequence[Event]) -> tuple[int, int]:
    """Deliveries, and redeliveries: an offset delivered again to the same subscription."""
    seen: dict[tuple[str, str | None], set[int]] = defaultdict(set)
    deliveries = redeliveries = 0
    for e in events:
        if e.kind != "deliver" or e.offset is None:
            continue
        deliveries += 1
        offs = seen[(e.topic, e.subscription)]
        if e.offset in offs:
            redeliveries += 1
        else:
            offs.add(e.offset)
    return deliveries, redeliveries


def _check_cursors(events: Sequence[Event], report: _Report) -> int:
    """Invariant 7: cursors never go back; nothing at or below a sampled cursor is delivered
    to that subscription after the sample. Returns the number of samples."""
    relevant = [e for e in events if e.kind == "cursor" or (e.kind == "deliver" and e.offset is not None)]
    relevant.sort(key=lambda e: e.time)  # stable: events at one instant keep their record order
    top: dict[tuple[str, str | None], Event] = {}  # the highest cursor sample so far
    samples = 0
    for e in relevant:
        assert e.offset is not None
        key = (e.topic, e.subscription)
        best = top.get(key)
        if e.kind == "cursor":
            samples += 1
            if best is not None and best.offset is not None and e.offset < best.offset:
                report.add(
                    "cursor-regression",
                    f"{e.topic} {e.subscription}: cursor {e.offset} sampled at {report.t(e.time)}, after "
                    f"cursor {best.offset} at {report.t(best.time)}",
                )
            if best is None or best.offset is None or e.offset > best.offset:
                top[key] = e
        elif best is not None and best.offset is not None and e.offset <= best.offset:
            report.add(
                "delivery-after-ack",
                f"{e.topic}@{e.offset} ({_name(e.msg)}) delivered to {report.ev(e)}, after cursor "
                f"{best.offset} was sampled at {report.t(best.time)}",
            )
    return samples


def _ack_gaps(
    events: Sequence[Event], t0: float
) -> tuple[float, dict[str, float], tuple[float, float] | None]:
    """The longest time between consecutive successful send acks, overall and per topic."""
    oks = sorted((e.time, e.topic) for e in events if e.kind == "send" and e.phase == "ok")
    longest = 0.0
    at: tuple[float, float] | None = None
    last_by_topic: dict[str, float] = {}
    per_topic: dict[str, float] = {}
    for i, (when, topic) in enumerate(oks):
        if i and when - oks[i - 1][0] > longest:
            longest = when - oks[i - 1][0]
            at = (oks[i - 1][0] - t0, when - t0)
        prev = last_by_topic.get(topic)
        per_topic[topic] = max(per_topic.get(topic, 0.0), 0.0 if prev is None else when - prev)
        last_by_topic[topic] = when
    return longest, per_topic, at


def _name(msg: MsgId | None) -> str:
    return "an undecodable payload" if msg is None else str(msg)
