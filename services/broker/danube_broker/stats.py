"""Per-topic and per-subscription counters, kept as plain attributes on the hot path.

Counting is a few integer additions per batch; readers (the stats API, load reports) take a
:class:`TopicStats` snapshot, a frozen value that is safe to hand around.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class Counters:
    #: Messages and payload bytes accepted from producers.
    msgs_in: int = 0
    bytes_in: int = 0
    #: Messages and payload bytes handed to consumer queues (one count per subscription).
    msgs_out: int = 0
    bytes_out: int = 0
    #: Messages not delivered to a subscription: no consumer to take them, or a full queue
    #: (slow consumer; see ``slow_consumer_policy``).
    msgs_dropped: int = 0
    #: Set by the load report on a topic it found idle: (a set, the topic's name). The next
    #: message in or out adds the name to the set, once (:meth:`moved`), so the report of an
    #: idle broker need not look at its topics one by one.
    watch: tuple[set[str], str] | None = None

    def moved(self) -> None:
        """Messages went in or out: tell the watcher, if any (callers test ``watch`` first)."""
        watch, self.watch = self.watch, None
        if watch is not None:
            watch[0].add(watch[1])

    def changed(self) -> None:
        """Something the load report shows changed without traffic (an ack, a producer or a
        consumer came or went): tell the watcher, if any."""
        if self.watch is not None:
            self.moved()


#: A topic's figures for the load report (``Topic.load_figures``): messages in, bytes in,
#: messages out, bytes out, backlog, producers, consumers.
LoadFigures = tuple[int, int, int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    name: str
    sub_type: str
    consumers: int
    connected_consumers: int
    msgs_out: int
    bytes_out: int
    msgs_dropped: int
    acks: int
    nacks: int
    #: Non-reliable: messages waiting in this subscription's consumer queues. Reliable:
    #: messages published and not acknowledged.
    backlog: int
    # ---- reliable subscriptions only
    #: Every offset <= cursor is acknowledged (None: nothing yet, or not reliable).
    cursor: int | None = None
    unacked_in_flight: int = 0
    pending_redeliveries: int = 0
    delivered_total: int = 0
    redelivered_total: int = 0
    dead_lettered_total: int = 0
    dropped_total: int = 0
    #: Offset the subscription is blocked at (poison policy ``block``), if any.
    blocked_at: int | None = None
    msg_rate_out: float = 0.0
    #: Why reading the log is failing right now ("" when it is not): a damaged frame, a gap in
    #: the history (HISTORY_GAP), object storage unreachable. The subscription stalls meanwhile.
    read_error: str = ""
    #: Offsets skipped because they are gone (retention, or an accepted gap).
    skipped_total: int = 0
    #: Delayed messages read and held back until their due time (shared, key-shared).
    delayed: int = 0


@dataclass(frozen=True, slots=True)
class TieredStats:
    """A reliable topic's object storage: history read back, and ``cloud`` acks."""

    #: Offsets ``[history_first_offset, history_end_offset)`` are described in etcd (None: none).
    history_first_offset: int | None = None
    history_end_offset: int | None = None
    descriptors: int = 0
    #: Reads served from object storage, their entries, and the GETs and bytes they fetched.
    remote_reads: int = 0
    remote_entries: int = 0
    remote_gets: int = 0
    remote_bytes_fetched: int = 0
    #: Failed reads (gap, damaged object, store unreachable) and the last one's message.
    remote_errors: int = 0
    last_remote_error: str = ""
    #: Segments (and bytes) retention deleted from object storage since this broker opened it.
    retention_deleted_segments: int = 0
    retention_deleted_bytes: int = 0
    #: ``cloud`` durability: offsets below this are confirmed uploaded (None: not a cloud topic).
    cloud_uploaded_next_offset: int | None = None
    #: Publishes waiting for object storage, Flush calls that succeeded / failed, last failure.
    cloud_waiting: int = 0
    cloud_flushes: int = 0
    cloud_flush_failures: int = 0
    last_cloud_error: str = ""


@dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    dispatch_strategy: str
    msgs_in: int
    bytes_in: int
    msgs_out: int
    bytes_out: int
    msgs_dropped: int
    producers: int
    consumers: int
    subscriptions: int
    #: Next offset to be assigned (non-reliable: messages published since the topic was
    #: loaded here; reliable: the log's next offset).
    next_offset: int
    per_subscription: dict[str, SubscriptionStats] = field(default_factory=dict)
    msg_rate_in: float = 0.0
    bytes_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    # ---- reliable topics only
    durability: str = ""
    #: The oldest offset kept: in object storage when configured, else in the local WAL.
    first_offset: int = 0
    #: The oldest offset in the local WAL (older ones are in object storage).
    local_first_offset: int = 0
    wal_bytes: int = 0
    wal_segments: int = 0
    #: Object storage's figures (None: not configured).
    tiered: TieredStats | None = None
    #: The log's current stint: (writer, ownership epoch, start offset, reserved_to) (None: not open).
    log_stint: tuple[str, int, int, int] | None = None
    #: "" when serving; otherwise what the topic waits for.
    state: str = ""
    #: Offsets given up by recorded decisions: (start, end, reason, decided_by, at_ms, writer).
    accepted_gaps: tuple[tuple[int, int, str, str, int, str], ...] = ()


class Rate:
    """An exponentially decayed event rate (events per second, time constant ``tau_s``).

    Each event contributes ``1 / tau_s`` that decays as ``exp(-age / tau_s)``, so a steady
    stream of r events per second reads r, and the reading fades once the stream stops.
    Times are the caller's monotonic clock (seconds).
    """

    __slots__ = ("_at", "_rate", "tau_s")

    def __init__(self, tau_s: float = 5.0) -> None:
        self.tau_s = tau_s
        self._rate = 0.0
        self._at = 0.0

    def add(self, n: float, now: float) -> None:
        self._rate = self.value(now) + n / self.tau_s
        self._at = now

    def value(self, now: float) -> float:
        if self._rate == 0.0:
            return 0.0
        return self._rate * math.exp(-max(0.0, now - self._at) / self.tau_s)
