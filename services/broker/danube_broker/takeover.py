"""Opening a reliable topic's log here: exactly where the previous writer's log ended.

The rules are :mod:`danube_common.log_state`'s; this module is the loop that applies them when a
reliable topic is opened on this broker:

1. read the log record, the reservation and the upload checkpoint (one consistent read) and
   where object storage's descriptors end;
2. look at this broker's own directory for the topic: one of another incarnation (a deleted
   topic of the same name) is removed; otherwise the WAL is opened (its lock held) to learn
   where it ends;
3. decide (:func:`~danube_common.log_state.decide_open`):
   - **start** at an offset: use the local WAL if it ends exactly there; otherwise set it aside
     (``<dir>.superseded-<end>``) and start a fresh one at that offset; mark the directory with
     the topic's incarnation; then record the new stint in one transaction fenced on the
     ownership epoch and on every record read in 1. If anything changed meanwhile, start over;
   - **wait**: another broker's stint is open (it died, or froze, without handing the topic
     over): poll the record until its end is recorded (by its uploader, by itself after a
     restart, or by an operator), meanwhile clients get TAKEOVER_PENDING (retryable). With an
     ``unclean_takeover_after_s`` policy, and the writer not registered, the wait ends after
     that long with a forced takeover that records the offsets given up;
   - **refuse**: the records contradict each other: HISTORY_CONFLICT, loudly, until an
     operator repairs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from danube_broker import ownership_spans
from danube_broker.config import BrokerConfig
from danube_broker.dispatch.reliable.log_port import TopicLogPort
from danube_broker.wal import CommitGroup, Durability, TopicLog, WalObserver
from danube_broker.wal.remote import RemoteHistory
from danube_common.errors import DanubeError, HistoryConflict, TakeoverPending, TopicNotOwned
from danube_common.log_state import (
    LogRecords,
    LogState,
    LogView,
    Refuse,
    Reservation,
    Start,
    Wait,
    decide_open,
    merge_sequences,
)
from danube_common.metadata.store import Compare
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_common.wal.marker import read_incarnation, write_incarnation

log = logging.getLogger(__name__)

#: Polling of a waited-for log record: first interval, longest interval.
_POLL_FIRST_S = 0.05
_POLL_MAX_S = 0.5

#: Opens the WAL of ``directory`` (an injected opener, in tests) starting at ``initial_offset``
#: when the directory is empty.
LogOpener = Callable[[Path, Durability, int], Awaitable[TopicLogPort]]


@dataclass(frozen=True, slots=True)
class Opened:
    log: TopicLogPort
    stint: LogState
    reservation: Reservation
    #: The upload checkpoint when the stint was recorded (None: nothing uploaded yet).
    uploaded: int | None = None

    @property
    def history_floor(self) -> int:
        """Where the topic's history starts at the latest: everything below the stint's start
        that object storage does not hold yet is on its way there."""
        start = self.stint.start_offset
        if self.uploaded is not None and self.uploaded >= start:
            return start
        return self.uploaded if self.uploaded is not None else 0


@dataclass(slots=True)
class Waiting:
    """What an open is waiting for (shown to clients and in stats)."""

    writer: str
    since_s: float
    reason: str
    unclean_after_s: float = 0.0

    def error(self, topic: str) -> TakeoverPending:
        waited = time.monotonic() - self.since_s
        then = (
            f"; after {self.unclean_after_s:g}s without it the takeover is forced (unclean_takeover_after_s)"
            if self.unclean_after_s
            else f"; if broker {self.writer}'s disk is lost for good: "
            f"danube-admin topics force-takeover {topic} --accept-loss"
        )
        return TakeoverPending(
            f"topic {topic} is being taken over from broker {self.writer}, which stopped without handing it "
            f"over: waiting {waited:.1f}s so far for its log's end to be recorded (its WAL uploader records it; "
            f"nothing acknowledged is given up){then}"
        )


def _topic_dir_busy_aside(directory: Path, suffix: str) -> Path:
    aside = directory.with_name(f"{directory.name}.{suffix}")
    n = 1
    while aside.exists():
        n += 1
        aside = directory.with_name(f"{directory.name}.{suffix}.{n}")
    return aside


def _mark(directory: Path, incarnation: int) -> None:
    if read_incarnation(directory) != incarnation:
        write_incarnation(directory, incarnation)


def _has_segments(directory: Path) -> bool:
    try:
        return any(p.suffix == ".wal" for p in directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


class LogOpening:
    """One attempt, possibly long, to open a topic's log here (see the module docstring)."""

    def __init__(
        self,
        topic: TopicName,
        *,
        incarnation: int | None,
        directory: Path,
        durability: Durability,
        cfg: BrokerConfig,
        resources: Resources,
        epoch: Callable[[], int],
        closed: Callable[[], bool],
        history: RemoteHistory | None = None,
        opener: LogOpener | None = None,
        cloud_acks: bool = False,
        unclean_after_s: float = 0.0,
        writer_alive: Callable[[str], Awaitable[bool]] | None = None,
        wal_observer: WalObserver | None = None,
        commit_group: CommitGroup | None = None,
    ) -> None:
        self.topic = topic
        self._wal_observer = wal_observer
        self._commit_group = commit_group
        self.incarnation = incarnation
        self.directory = directory
        self.durability = durability
        self._cfg = cfg
        self._res = resources
        self._records = LogRecords(resources.store, resources.keys)
        self._epoch = epoch
        self._closed = closed
        self._history = history
        self._opener = opener
        self._cloud_acks = cloud_acks
        self._unclean_after_s = unclean_after_s
        self._writer_alive = writer_alive
        #: Set while waiting for another writer's end.
        self.waiting: Waiting | None = None

    @property
    def me(self) -> str:
        return self._cfg.broker_id

    async def run(self) -> Opened:
        """Open the log; raises TopicNotOwned when ownership moves away meanwhile,
        HistoryConflict when the records contradict each other. An ``open log {topic}`` span
        when a sampled span is current (a traced load or client call)."""
        with ownership_spans.opening_log(str(self.topic)) as span:
            opened = await self._run()
            ownership_spans.annotate(
                span,
                {
                    "danube.log.start_offset": opened.stint.start_offset,
                    "danube.ownership.epoch": opened.stint.epoch,
                    "danube.log.reserved_to": opened.reservation.reserved_to,
                },
            )
            return opened

    async def _run(self) -> Opened:
        while True:
            self._check_owned()
            view = await self._records.read(self.topic, incarnation=self.incarnation)
            uploaded = await self._uploaded_end()
            local = await self._open_local(view.state)
            local_end = local.next_offset if local is not None else None
            decision = decide_open(
                view,
                me=self.me,
                incarnation=self.incarnation,
                uploaded_end=uploaded,
                local_end=local_end,
            )
            if isinstance(decision, Refuse):
                if local is not None:
                    await local.aclose()
                log.error("topic %s: refusing to open its log: %s", self.topic, decision.reason)
                raise HistoryConflict(f"topic {self.topic}: {decision.reason}; an operator must repair it")
            if isinstance(decision, Wait):
                if local is not None:
                    await local.aclose()
                await self._wait(view, decision)
                continue
            opened = await self._start(view, decision, local)
            if opened is not None:
                self.waiting = None
                return opened

    # ------------------------------------------------------------------ steps
    def _check_owned(self) -> None:
        if self._closed():
            raise TopicNotOwned(
                f"topic {self.topic} was unloaded while its log was opening; look it up again"
            )

    async def _uploaded_end(self) -> int | None:
        h = self._history
        if h is None:
            return None
        await h.refresh()
        return h.end_offset

    async def _open_local(self, state: LogState | None) -> TopicLogPort | None:
        """This broker's WAL of the topic, if it holds one of this incarnation (lock held)."""
        if self._opener is not None:
            # An injected opener (tests) keeps one log per directory, like a disk: consulted when
            # the record says this broker wrote the log.
            if state is not None and state.open and state.writer == self.me:
                return await self._opener(self.directory, self.durability, state.start_offset)
            return None
        d = self.directory
        if not await asyncio.to_thread(_has_segments, d):
            return None
        marker = await asyncio.to_thread(read_incarnation, d)
        if marker is not None and self.incarnation is not None and marker != self.incarnation:
            log.warning(
                "topic %s: local log %s belongs to a deleted topic of the same name (incarnation %d, now %d); "
                "deleting it",
                self.topic,
                d,
                marker,
                self.incarnation,
            )
            await asyncio.to_thread(shutil.rmtree, d, True)
            return None
        return await TopicLog.open(
            d,
            cfg=self._cfg.wal,
            durability=self.durability,
            observer=self._wal_observer,
            group=self._commit_group,
        )

    async def _start(self, view: LogView, start: Start, local: TopicLogPort | None) -> Opened | None:
        start = self._with_uploaded_sequences(start)
        log_ = await self._local_at(start.offset, local)
        try:
            if self._opener is None and self.incarnation is not None:
                await asyncio.to_thread(_mark, self.directory, self.incarnation)
            epoch = self._epoch()
            result = await self._records.open_stint(
                self.topic,
                view,
                start,
                writer=self.me,
                epoch=epoch,
                incarnation=self.incarnation,
                reserve=self._cfg.offset_reservation_block,
                cloud_acks=self._cloud_acks,
                owner_fence=[Compare.mod_revision_is(self._res.keys.owner(self.topic), epoch)],
            )
        except BaseException:
            await log_.aclose()
            raise
        if result is None:
            await log_.aclose()
            await self._refresh_epoch()
            return None
        stint, reservation = result
        ownership_spans.event("log stint recorded", start_offset=start.offset, how=start.note)
        log.info(
            "topic %s: log opened at offset %d (%s; epoch %d, offsets reserved below %d)",
            self.topic,
            start.offset,
            start.note,
            stint.epoch,
            reservation.reserved_to,
        )
        return Opened(log_, stint, reservation, view.checkpoint)

    def _with_uploaded_sequences(self, start: Start) -> Start:
        """A ``cloud`` writer's stint closed by us at what object storage holds: its producers'
        sequence ids are in the descriptors of what it uploaded (deduplication continues)."""
        prev = start.previous or {}
        if prev.get("closed_by") != "cloud" or self._history is None:
            return start
        since = int(prev.get("start_offset", 0))
        uploaded = [d.producer_sequences for d in self._history.descriptors if d.next_offset > since]
        return replace(start, inherited=merge_sequences(start.inherited, *uploaded))

    async def _local_at(self, offset: int, local: TopicLogPort | None) -> TopicLogPort:
        """A WAL that continues at ``offset``: ``local`` if it ends exactly there, else a fresh one
        (a local log that ends elsewhere is set aside)."""
        if self._opener is not None:
            if local is not None and local.next_offset == offset:
                return local
            return await self._opener(self.directory, self.durability, offset)
        if local is not None:
            if local.next_offset == offset:
                return local
            end = local.next_offset
            await local.aclose()
            aside = _topic_dir_busy_aside(self.directory, f"superseded-{end}")
            await asyncio.to_thread(self.directory.rename, aside)
            log.warning(
                "topic %s: the local log ends at %d but the topic continues at %d: set aside as %s "
                "(what it holds past %d was never acknowledged, or is in object storage; safe to delete)",
                self.topic,
                end,
                offset,
                aside,
                min(end, offset),
            )
        return await TopicLog.open(
            self.directory,
            cfg=self._cfg.wal,
            durability=self.durability,
            initial_offset=offset,
            observer=self._wal_observer,
            group=self._commit_group,
        )

    async def _refresh_epoch(self) -> None:
        """The open transaction failed: if the owner key moved on without us, stop."""
        own = await self._res.get_owner(self.topic)
        if own is None or own.broker_id != self.me:
            raise TopicNotOwned(
                f"topic {self.topic} is no longer owned by broker {self.me}; look it up again"
            )

    async def _wait(self, view: LogView, wait: Wait) -> None:
        """Until the waited-for record changes (or the unclean-takeover policy forces it)."""
        state = wait.state
        if self.waiting is None or self.waiting.writer != state.writer:
            self.waiting = Waiting(state.writer, time.monotonic(), wait.reason, self._unclean_after_s)
            ownership_spans.event("waiting for the previous writer's log end", writer=state.writer)
            log.warning(
                "topic %s: %s; waiting for it (clients are told to retry)%s",
                self.topic,
                wait.reason,
                f"; forcing the takeover after {self._unclean_after_s:g}s" if self._unclean_after_s else "",
            )
        pause = _POLL_FIRST_S
        while True:
            self._check_owned()
            overdue = (
                self._unclean_after_s and time.monotonic() - self.waiting.since_s >= self._unclean_after_s
            )
            if overdue and await self._force(state):
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)
            current = await self._records.read(self.topic, incarnation=self.incarnation)
            if current.state_revision != view.state_revision:
                if current.state is not None and not current.state.open:
                    log.info(
                        "topic %s: broker %s's log end is recorded (%s at offset %s) after %.1fs",
                        self.topic,
                        state.writer,
                        current.state.closed_by,
                        current.state.next_offset,
                        time.monotonic() - self.waiting.since_s,
                    )
                return
            with contextlib.suppress(DanubeError):
                await self._refresh_epoch()

    async def _force(self, state: LogState) -> bool:
        if self._writer_alive is not None and await self._writer_alive(state.writer):
            log.warning(
                "topic %s: unclean_takeover_after_s elapsed but broker %s is registered (alive): not forcing",
                self.topic,
                state.writer,
            )
            return False
        decided_by = f"broker {self.me} (unclean_takeover_after_s={self._unclean_after_s:g})"
        try:
            closed, gap = await self._records.force_close(
                self.topic,
                decided_by=decided_by,
                reason=f"broker {state.writer}'s log end was not recorded within {self._unclean_after_s:g}s",
                incarnation=self.incarnation,
            )
        except DanubeError as exc:
            log.error("topic %s: could not force the takeover: %s", self.topic, exc)
            return False
        log.error(
            "topic %s: UNCLEAN TAKEOVER from broker %s: continuing at offset %d; %s",
            self.topic,
            state.writer,
            closed.next_offset,
            f"offsets {gap.start_offset}..{gap.next_offset - 1} are given up (recorded as an accepted gap)"
            if gap is not None
            else "object storage held everything",
        )
        return True


def _local_topics(data_path: Path) -> list[tuple[TopicName, Path]]:
    """Topic directories of this broker's data directory (set-aside ones excluded). Blocking."""
    out: list[tuple[TopicName, Path]] = []
    try:
        namespaces = [p for p in data_path.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return out
    for ns in namespaces:
        for d in ns.iterdir():
            if not d.is_dir() or ".superseded-" in d.name:
                continue
            try:
                out.append((TopicName.parse(f"/{ns.name}/{d.name}"), d))
            except DanubeError:
                continue
    return out


async def close_orphaned_stints(cfg: BrokerConfig, resources: Resources, *, owned: set[str]) -> int:
    """At start-up: record the end of this broker's own stints of topics it no longer owns.

    A broker that died (or froze) without handing its topics over leaves their log records open;
    its WAL uploader normally records their ends from this disk. If the uploader did not (none is
    configured, or it died too), the topics' new owners wait. Restarted, this broker holds the
    directory and its true end: it records it (``writer_restart``, fenced on the record), so the
    new owners can go on. Returns how many it recorded."""
    records = LogRecords(resources.store, resources.keys)
    closed = 0
    for name, directory in await asyncio.to_thread(_local_topics, cfg.data_path):
        if str(name) in owned:
            continue
        try:
            state = await records.state(name)
            if state is None or not state.open or state.writer != cfg.broker_id:
                continue
            marker = await asyncio.to_thread(read_incarnation, directory)
            if state.incarnation is not None and marker != state.incarnation:
                continue
            local = await TopicLog.open(directory, cfg=cfg.wal, durability=Durability.FSYNC)
            try:
                end, sequences = local.next_offset, local.producer_sequences()
            finally:
                await local.aclose()
            if end < state.start_offset:
                log.error(
                    "topic %s: our log record says we wrote it from offset %d but this disk ends at %d: not "
                    "recording an end (the new owner waits for an operator)",
                    name,
                    state.start_offset,
                    end,
                )
                continue
            if await records.close(
                name,
                state,
                next_offset=end,
                closed_by="writer_restart",
                sequences=sequences,
                detail=f"broker {cfg.broker_id} restarted with the log on its disk",
            ):
                closed += 1
                log.warning(
                    "topic %s: this broker had stopped without handing it over; its log end (offset %d) is "
                    "recorded now, so its new owner can go on",
                    name,
                    end,
                )
        except DanubeError as exc:
            log.warning("topic %s: could not record the end of our earlier log: %s", name, exc)
    return closed
