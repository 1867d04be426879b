"""One topic's uploads: plan, read, PUT, descriptor + checkpoint; and a dead broker's log end.

Every step starts from what etcd and the disk say now (nothing is trusted from a previous
step, except as a shortcut to skip a topic with nothing new), so a step that failed half-way,
in this process or in one that crashed, is simply planned again:

1. list the segments and read the directory's incarnation marker; read the log record
   (``danube_common.log_state``), the checkpoint, the descriptors and the accepted gaps;
2. bound what this disk may contribute (:func:`~danube_common.log_state.upload_bound`: a
   directory of another incarnation nothing; this broker's open stint everything; otherwise only
   what ended before the current stint) and plan (:func:`danube_wal_uploader.next_step.next_step`);
3. build the object from the segment file (every frame checked) in a thread;
4. PUT it under its deterministic key, which names the incarnation and the log record's
   revision (same range, same record: the same bytes; a re-PUT after a crash is harmless, and
   another writer's object can never be overwritten);
5. one transaction: create the descriptor only if absent, move the checkpoint from the value
   read in 1 (its ``mod_revision``) to the range's end, and compare the log record's
   ``mod_revision``. A transaction that fails (someone else moved first, or the log record
   changed: a new writer took over) writes nothing: plan again.

**The broker is dead** (its registration is gone): first record where its log ends, if the log
record still says this broker writes the topic: the intact end of the local log (every crc
checked, after an fsync), with the highest sequence id per producer, closing the stint in a
transaction fenced on the record. The new owner waits for exactly this. Then upload the rest up
to that end. Reading without the broker's directory lock is safe: a broker acknowledges only
before its lease's deadline, which passes before etcd expires the lease, so every acknowledged
frame was written before this read; anything a woken broker writes later was never acknowledged
and lies past the recorded end.

One step at a time per topic (``lock``); Flush calls and the background pass share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from danube_common.errors import DanubeError, FailedPrecondition, Unavailable
from danube_common.keys import Keys
from danube_common.log_state import (
    AcceptedGap,
    LogRecords,
    LogState,
    checkpoint_of,
    checkpoint_value,
    upload_bound,
)
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.objstore import ObjectStore, backoff_delays
from danube_common.storage import SegmentDescriptor, object_key
from danube_common.topic_name import TopicName
from danube_common.wal.segment import HEADER_BYTES
from danube_wal_uploader import spans
from danube_wal_uploader.disk import Built, TopicDir
from danube_wal_uploader.metrics import TopicProgress, Totals
from danube_wal_uploader.next_step import (
    UNBOUNDED,
    Advance,
    Conflict,
    Gap,
    Idle,
    LocalSegment,
    Step,
    Upload,
    lag_bytes,
    local_end,
    next_step,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A streak of failures of one topic is logged at most this often (the first one always).
_FAILURE_LOG_INTERVAL_S = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_s: float
    max_s: float

    def delays(self) -> Iterator[float]:
        return backoff_delays(initial_s=self.initial_s, max_s=self.max_s)


@dataclass(slots=True)
class Context:
    """What every topic shares."""

    store: MetadataStore
    keys: Keys
    objects: ObjectStore
    broker_id: str
    uploads: asyncio.Semaphore
    totals: Totals
    retry: RetryPolicy


class StepFailed(Exception):
    """A step could not finish; ``retryable`` says whether trying again later can help."""

    def __init__(self, message: str, *, retryable: bool, gap: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        #: Waiting for data another uploader holds: the background retries, a Flush fails at once.
        self.gap = gap


@dataclass(frozen=True, slots=True)
class Outcome:
    step: Step
    #: The step changed etcd (upload or checkpoint move): plan again at once.
    progressed: bool = False


async def _blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` in a thread. If the caller is cancelled meanwhile, the thread's work is still
    waited for before the cancellation goes on: the topic's lock is never released while a
    thread still reads its directory."""
    fut = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await fut
        raise


def _checkpoint_of(kv: KeyValue | None, incarnation: int | None = None) -> int | None:
    """The checkpoint's offset (None: absent, or another incarnation's)."""
    if kv is None:
        return None
    try:
        return checkpoint_of(kv.json(), incarnation)
    except (ValueError, TypeError, KeyError) as exc:
        raise StepFailed(f"the upload checkpoint {kv.key} is malformed: {exc}", retryable=False) from exc


def _fence(key: str, kv: KeyValue | None) -> Compare:
    return Compare.absent(key) if kv is None else Compare.mod_revision_is(key, kv.mod_revision)


class TopicUploader:
    def __init__(self, name: TopicName, directory: Path, ctx: Context) -> None:
        self.name = name
        self.dir = TopicDir(directory)
        self.ctx = ctx
        self.progress = TopicProgress(str(name))
        self.lock = asyncio.Lock()
        #: A background pass is scheduled or running.
        self.scheduled = False
        #: Monotonic time before which the background pass leaves the topic alone (backoff).
        self.retry_at = 0.0
        #: The highest ``up_to_offset`` a Flush asked for: offsets below it are durable.
        self._flush_to = 0
        #: The checkpoint as last read or written (only ever behind the truth: a shortcut).
        self._checkpoint: int | None = None
        #: ``_checkpoint`` was read at least once (None then means "absent").
        self._checked = False
        self._delays: Iterator[float] | None = None
        self._streak = 0
        self._last_failure_log = 0.0
        self._reported = ""
        #: The broker-death epoch whose log end is dealt with: recorded by us, or not ours (-1: none).
        self.closed_epoch = -1
        #: The broker-death epoch after which everything up to the recorded end is uploaded.
        self.done_epoch = -1

    # ------------------------------------------------------------------ keys

    @property
    def _cp_key(self) -> str:
        return self.ctx.keys.upload_checkpoint(self.name)

    @property
    def _state_key(self) -> str:
        return self.ctx.keys.storage_state(self.name)

    # ------------------------------------------------------------------ one step

    async def step(self, open_limit: int | None) -> Outcome:
        """Plan and carry out one step (the caller holds ``lock``). Raises StepFailed."""
        try:
            return await self._step(open_limit)
        except StepFailed:
            raise
        except FileNotFoundError as exc:
            raise StepFailed(
                f"a file went away while reading it (retention or a move): {exc}", retryable=True
            ) from exc
        except DanubeError as exc:
            raise StepFailed(exc.message, retryable=exc.retryable) from exc
        except OSError as exc:
            raise StepFailed(f"reading {self.dir.path}: {exc}", retryable=True) from exc

    async def _read_records(self) -> tuple[KeyValue | None, KeyValue | None]:
        """The log record and the checkpoint, in one consistent read."""
        res = await self.ctx.store.txn([], [Op.get(self._state_key), Op.get(self._cp_key)])
        return res.gets[0], res.gets[1]

    async def _step(self, open_limit: int | None) -> Outcome:
        store = self.ctx.store
        segments = await _blocking(self.dir.list)
        incarnation = await _blocking(self.dir.incarnation)
        state_kv, cp_kv = await self._read_records()
        state = LogState.from_kv(state_kv) if state_kv is not None else None
        checkpoint = _checkpoint_of(cp_kv, incarnation)
        self._note(segments, checkpoint)
        bound = upload_bound(state, me=self.ctx.broker_id, incarnation=incarnation)
        if bound is None or state_kv is None:
            return Outcome(Idle(self._not_ours(state, incarnation)))
        descriptors = await self._descriptors()
        gaps = await self._gaps()
        step = next_step(
            checkpoint=checkpoint,
            descriptors=descriptors,
            segments=segments,
            open_limit=open_limit,
            bound=bound,
            gaps=[(g.start_offset, g.next_offset) for g in gaps],
        )
        if isinstance(step, Advance):
            assert checkpoint is None or step.to > checkpoint
            res = await store.txn(
                [_fence(self._cp_key, cp_kv)], [Op.put(self._cp_key, self._cp_value(step.to, incarnation))]
            )
            if res.succeeded:
                log.info(
                    "topic %s: checkpoint %s -> %d (already described in etcd, or an accepted gap)",
                    self.name,
                    checkpoint,
                    step.to,
                )
                self._note(segments, step.to)
            return Outcome(step, progressed=res.succeeded)
        if isinstance(step, Conflict):
            self.ctx.totals.overlaps_refused += 1
            raise StepFailed(f"refused: {step.detail}", retryable=False)
        if isinstance(step, Gap):
            raise StepFailed(step.message(), retryable=True, gap=True)
        if isinstance(step, Idle):
            return Outcome(step)
        assert isinstance(step, Upload)
        return await self._upload(step, segments, open_limit, incarnation, state_kv, cp_kv)

    async def _upload(
        self,
        step: Upload,
        segments: list[LocalSegment],
        open_limit: int | None,
        incarnation: int | None,
        state_kv: KeyValue,
        cp_kv: KeyValue | None,
    ) -> Outcome:
        """Build the object, PUT it, then describe it and move the checkpoint in one transaction
        (an ``upload`` span around it all while tracing is on: :mod:`danube_wal_uploader.spans`)."""
        store, keys = self.ctx.store, self.ctx.keys
        seg = next(s for s in segments if s.first_offset == step.segment)
        with contextlib.ExitStack() as traced:
            async with self.ctx.uploads:
                started_ns = time.time_ns()
                fsync = open_limit == UNBOUNDED and not step.sealed
                built = await _blocking(self._build, seg, step, fsync, spans.trace_links())
                if built.end == built.start:
                    return Outcome(Idle("no new frames"))
                key = object_key(
                    self.name, built.start, built.end, incarnation=incarnation, revision=state_kv.mod_revision
                )
                span = traced.enter_context(spans.uploading(str(self.name), built, key, start_ns=started_ns))
                await self.ctx.objects.put(key, built.data)
            desc = SegmentDescriptor(
                topic=str(self.name),
                start_offset=built.start,
                next_offset=built.end,
                object_key=key,
                size_bytes=len(built.data),
                crc32c=built.crc32c,
                max_publish_time_ms=built.max_publish_time_ms,
                uploaded_at_ms=now_ms(),
                broker_id=self.ctx.broker_id,
                sealed=step.sealed and built.end == seg.next_offset,
                incarnation=incarnation,
                producer_sequences=built.producer_sequences,
            )
            desc_key = keys.segment(self.name, built.start)
            res = await store.txn(
                [
                    Compare.absent(desc_key),
                    _fence(self._cp_key, cp_kv),
                    Compare.mod_revision_is(self._state_key, state_kv.mod_revision),
                ],
                [
                    Op.put(desc_key, desc.to_json()),
                    Op.put(self._cp_key, self._cp_value(built.end, incarnation)),
                ],
            )
            spans.described(span, recorded=res.succeeded)
        if not res.succeeded:
            log.info(
                "topic %s: [%d, %d) was uploaded but etcd changed meanwhile (another writer, or the log "
                "record): planning again",
                self.name,
                built.start,
                built.end,
            )
            return Outcome(step, progressed=True)
        self.ctx.totals.uploads += 1
        self.ctx.totals.bytes_uploaded += len(built.data)
        self.progress.last_upload_at_ms = desc.uploaded_at_ms
        self._note(segments, built.end)
        log.debug(
            "topic %s: uploaded [%d, %d) as %s (%d bytes)",
            self.name,
            built.start,
            built.end,
            key,
            len(built.data),
        )
        return Outcome(step, progressed=True)

    def _not_ours(self, state: LogState | None, incarnation: int | None) -> str:
        if state is None:
            return "the topic has no log record (deleted, or never opened): nothing of this directory is uploaded"
        if incarnation is None:
            return "the directory has no incarnation marker (the broker has not opened it yet)"
        return (
            f"the directory belongs to incarnation {incarnation} of the topic, the log record to "
            f"{state.incarnation} (a deleted topic of the same name): nothing of it is uploaded"
        )

    def _build(self, seg: LocalSegment, step: Upload, fsync: bool, trace_links: int) -> Built:
        """Blocking (thread). The open segment of a dead broker is fsync'ed first."""
        return self.dir.build(seg, step.start, step.end, fsync=fsync, trace_links=trace_links)

    async def _descriptors(self) -> list[SegmentDescriptor]:
        kvs, _ = await self.ctx.store.get_prefix(self.ctx.keys.segments_prefix(self.name))
        out = []
        for kv in kvs:
            try:
                out.append(SegmentDescriptor.from_json(kv.json()))
            except (ValueError, TypeError) as exc:
                raise StepFailed(f"descriptor {kv.key} is malformed: {exc}", retryable=False) from exc
        return out

    async def _gaps(self) -> list[AcceptedGap]:
        return await LogRecords(self.ctx.store, self.ctx.keys).gaps(self.name)

    def _cp_value(self, next_offset: int, incarnation: int | None) -> dict[str, Any]:
        return checkpoint_value(next_offset, broker_id=self.ctx.broker_id, incarnation=incarnation)

    def _note(self, segments: list[LocalSegment], checkpoint: int | None) -> None:
        self._checkpoint = checkpoint
        self._checked = True
        p = self.progress
        end = local_end(segments)
        p.local_next_offset = end if end is not None else 0
        uploaded = checkpoint if checkpoint is not None else (segments[0].first_offset if segments else 0)
        p.uploaded_next_offset = checkpoint if checkpoint is not None else 0
        p.lag_bytes = lag_bytes(segments, uploaded, header_bytes=HEADER_BYTES)

    # ------------------------------------------------------------------ runs of steps

    async def refresh(self) -> bool:
        """Update the local half of the progress (no etcd; the caller holds ``lock``); True when
        there may be work for a background pass (a sealed segment past the cached checkpoint,
        or nothing known yet)."""
        segments = await _blocking(self.dir.list)
        if not self._checked:
            return bool(segments)
        self._note(segments, self._checkpoint)
        done = self._checkpoint if self._checkpoint is not None else -1
        return any(s.sealed and (s.next_offset or 0) > done for s in segments)

    async def pump(self, open_limit: int | None) -> Outcome:
        """Steps until there is nothing more to do now (the caller holds ``lock``). Raises StepFailed."""
        while True:
            out = await self.step(open_limit)
            self._succeeded()
            if not out.progressed:
                return out

    async def flush(self, up_to: int | None, *, dead: bool, deadline: float) -> int:
        """Upload until the checkpoint reaches ``up_to`` (None: everything known durable: sealed
        segments, and the whole intact tail when the broker is dead); returns the checkpoint.

        Retryable faults are retried with backoff until ``deadline`` (loop time), then
        Unavailable; a gap, an overlap or damage raise FailedPrecondition at once."""
        if up_to:
            self._flush_to = max(self._flush_to, up_to)
        loop = asyncio.get_running_loop()
        async with self.lock:
            delays = self.ctx.retry.delays()
            while True:
                if up_to and self._checkpoint is not None and self._checkpoint >= up_to:
                    return self._checkpoint
                limit = UNBOUNDED if dead else (self._flush_to or None)
                try:
                    out = await self.pump(limit)
                except StepFailed as exc:
                    self._failed(exc)
                    delay = next(delays)
                    if not exc.retryable or exc.gap:
                        raise FailedPrecondition(f"cannot upload topic {self.name}: {exc.message}") from None
                    if loop.time() + delay >= deadline:
                        raise Unavailable(
                            f"could not upload topic {self.name} in time (the store or etcd keeps failing): "
                            f"{exc.message}"
                        ) from None
                    await asyncio.sleep(delay)
                    continue
                checkpoint = self._checkpoint or 0
                if up_to and checkpoint < up_to:
                    raise FailedPrecondition(
                        f"cannot upload topic {self.name} up to offset {up_to}: the local log holds intact "
                        f"frames up to {max(checkpoint, self.progress.local_next_offset) - 1} "
                        f"({out.step})"
                    )
                return checkpoint

    # ------------------------------------------------------------------ failures

    def _failed(self, exc: StepFailed) -> None:
        """Count and report a failed step, and schedule the next background attempt."""
        self.ctx.totals.upload_errors += 1
        self.progress.upload_errors += 1
        self.progress.last_error = exc.message
        if self._delays is None:
            self._delays = self.ctx.retry.delays()
        delay = next(self._delays) if exc.retryable else self.ctx.retry.max_s
        loop = asyncio.get_running_loop()
        self.retry_at = loop.time() + delay
        self._streak += 1
        now = loop.time()
        if exc.message != self._reported or now - self._last_failure_log >= _FAILURE_LOG_INTERVAL_S:
            level = logging.WARNING if exc.retryable else logging.ERROR
            log.log(
                level,
                "topic %s: upload step failed (%d in a row, next try in %.1fs): %s",
                self.name,
                self._streak,
                delay,
                exc.message,
            )
            self._reported = exc.message
            self._last_failure_log = now

    def _succeeded(self) -> None:
        if self._streak:
            log.info("topic %s: uploads resumed after %d failed step(s)", self.name, self._streak)
        self._streak = 0
        self._delays = None
        self._reported = ""
        self.retry_at = 0.0
        self.progress.last_error = ""

    # ------------------------------------------------------------------ background pass

    async def run_pass(self, *, dead: bool, death_epoch: int) -> None:
        """The background pass: upload sealed segments; when the broker is dead, first record
        where its log ends (if it still writes the topic), then upload everything up to there.
        Never raises StepFailed: failures are counted and the topic waits its backoff."""
        try:
            if dead and self.done_epoch == death_epoch:
                return
            async with self.lock:  # also keeps the directory's caches to one thread at a time
                if not dead and not await self.refresh():
                    return
                try:
                    if dead and self.closed_epoch != death_epoch:
                        await self._record_end(death_epoch)
                    out = await self.pump(UNBOUNDED if dead else None)
                    if dead and self.closed_epoch == death_epoch and isinstance(out.step, Idle):
                        self.done_epoch = death_epoch
                        log.info(
                            "topic %s: the dead broker's log is in object storage up to offset %s",
                            self.name,
                            self._checkpoint,
                        )
                except StepFailed as exc:
                    self._failed(exc)
        finally:
            self.scheduled = False

    async def _record_end(self, death_epoch: int) -> None:
        """The broker is dead: if the log record still says it writes this topic, close its stint
        at the intact end of the local log (with the producers' highest sequence ids), fenced on
        the record. The topic's next owner waits for exactly this."""
        store = self.ctx.store
        me = self.ctx.broker_id
        try:
            state_kv = await store.get(self._state_key)
            state = LogState.from_kv(state_kv) if state_kv is not None else None
            incarnation = await _blocking(self.dir.incarnation)
            if state is None or not state.open or state.writer != me or not state.matches(incarnation):
                self.closed_epoch = death_epoch  # nothing of ours to record
                return
            segments = await _blocking(self.dir.list)
            end, sequences = await _blocking(self.dir.intact_end, segments)
            if end is None or end < state.start_offset:
                raise StepFailed(
                    f"the log record says broker {me} writes the topic from offset {state.start_offset}, but this "
                    f"disk's log ends at {end}: it does not hold that log (a replaced disk?). The next owner "
                    "waits; if the data is lost for good: danube-admin topics force-takeover "
                    f"{self.name} --accept-loss",
                    retryable=False,
                )
            closed = await LogRecords(store, self.ctx.keys).close(
                self.name,
                state,
                next_offset=end,
                closed_by="uploader",
                sequences=sequences,
                detail=f"the WAL uploader of broker {me}, after the broker's lease ended",
            )
        except DanubeError as exc:
            raise StepFailed(
                f"recording the dead broker's log end: {exc.message}", retryable=exc.retryable
            ) from exc
        except OSError as exc:
            raise StepFailed(f"reading {self.dir.path} to find the log's end: {exc}", retryable=True) from exc
        if not closed:
            log.info("topic %s: the log record changed while recording its end; looking again", self.name)
            return
        self.closed_epoch = death_epoch
        self.progress.final = True
        self.ctx.totals.final_states += 1
        log.info(
            "topic %s: broker %s is dead; its log ends at offset %d (recorded for the next owner; offsets "
            "%d..%d of its stint)",
            self.name,
            me,
            end,
            state.start_offset,
            end - 1,
        )
