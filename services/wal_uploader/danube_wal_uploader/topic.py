"""One topic's uploads: plan, read, PUT, descriptor + checkpoint; and its final state.

Every step starts from what etcd and the disk say now (nothing is trusted from a previous
step, except as a shortcut to skip a topic with nothing new), so a step that failed half-way,
in this process or in one that crashed, is simply planned again:

1. list the segments; read the checkpoint and the descriptors;
2. plan (:func:`danube_wal_uploader.plan.next_step`);
3. build the object from the segment file (every frame checked) in a thread;
4. PUT it under its deterministic key (same range, same bytes: re-PUT after a crash is harmless);
5. one transaction: create the descriptor only if absent, and move the checkpoint from the
   value read in 1 (its ``mod_revision``) to the range's end. A transaction that fails
   (someone else moved first) writes nothing: plan again.

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
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.objstore import ObjectStore, backoff_delays
from danube_common.storage import SegmentDescriptor, object_key
from danube_common.topic_name import TopicName
from danube_common.wal.segment import HEADER_BYTES
from danube_wal_uploader.disk import Built, DirectoryBusy, TopicDir, directory_lock
from danube_wal_uploader.metrics import TopicProgress, Totals
from danube_wal_uploader.plan import (
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
    #: The open segment was read to its last intact frame and nothing is left after the
    #: checkpoint (dead broker: the tail is fully uploaded).
    tail_done: bool = False
    #: Dead broker: this disk holds nothing at or after the checkpoint (an older stay of the
    #: topic, already uploaded): no final state to write from here.
    nothing_here: bool = False


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


def _checkpoint_of(kv: KeyValue | None) -> int | None:
    if kv is None:
        return None
    try:
        return int(kv.json()["next_offset"])
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
        #: The broker-death epoch whose final state is written (-1: none).
        self.final_epoch = -1

    # ------------------------------------------------------------------ keys

    @property
    def _cp_key(self) -> str:
        return self.ctx.keys.upload_checkpoint(self.name)

    # ------------------------------------------------------------------ one step

    async def step(self, open_limit: int | None) -> Outcome:
        """Plan and carry out one step (the caller holds ``lock``). Raises StepFailed."""
        try:
            return await self._step(open_limit)
        except StepFailed:
            raise
        except DirectoryBusy:
            raise StepFailed(
                f"the broker process still has {self.dir.path} open (its lease is gone but the process "
                "holds the log): its open segment is uploaded once it exits",
                retryable=True,
            ) from None
        except FileNotFoundError as exc:
            raise StepFailed(
                f"a file went away while reading it (retention or a move): {exc}", retryable=True
            ) from exc
        except DanubeError as exc:
            raise StepFailed(exc.message, retryable=exc.retryable) from exc
        except OSError as exc:
            raise StepFailed(f"reading {self.dir.path}: {exc}", retryable=True) from exc

    async def _step(self, open_limit: int | None) -> Outcome:
        store, keys = self.ctx.store, self.ctx.keys
        segments = await _blocking(self.dir.list)
        cp_kv = await store.get(self._cp_key)
        checkpoint = _checkpoint_of(cp_kv)
        descriptors = await self._descriptors()
        self._note(segments, checkpoint)
        step = next_step(
            checkpoint=checkpoint, descriptors=descriptors, segments=segments, open_limit=open_limit
        )
        if isinstance(step, Advance):
            assert checkpoint is None or step.to > checkpoint
            res = await store.txn(
                [_fence(self._cp_key, cp_kv)], [Op.put(self._cp_key, self._cp_value(step.to))]
            )
            if res.succeeded:
                log.info(
                    "topic %s: checkpoint %s -> %d (already described in etcd: a previous run stored it)",
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
            # With the broker dead and no open segment (it died between sealing one and starting
            # the next), the tail is done once the checkpoint is the end of the sealed segments.
            end = local_end(segments)
            dead = open_limit == UNBOUNDED
            done = dead and checkpoint is not None and checkpoint == end
            behind = dead and (end is None or (checkpoint is not None and checkpoint > end))
            return Outcome(step, tail_done=done, nothing_here=behind)
        assert isinstance(step, Upload)
        seg = next(s for s in segments if s.first_offset == step.segment)
        dead = open_limit == UNBOUNDED and not step.sealed
        async with self.ctx.uploads:
            built = await _blocking(self._build, seg, step, dead)
            if built.end == built.start:
                return Outcome(Idle("no new frames"), tail_done=dead and built.reached)
            key = object_key(self.name, built.start, built.end)
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
        )
        desc_key = keys.segment(self.name, built.start)
        res = await store.txn(
            [Compare.absent(desc_key), _fence(self._cp_key, cp_kv)],
            [Op.put(desc_key, desc.to_json()), Op.put(self._cp_key, self._cp_value(built.end))],
        )
        if not res.succeeded:
            log.info(
                "topic %s: [%d, %d) was uploaded but etcd changed meanwhile (another writer): planning again",
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

    def _build(self, seg: LocalSegment, step: Upload, dead: bool) -> Built:
        """Blocking (thread). The open segment of a dead broker is read under the broker's own
        directory lock, after an fsync: no broker process can write it meanwhile."""
        if dead:
            with directory_lock(self.dir.path):
                return self.dir.build(seg, step.start, step.end, fsync=True)
        return self.dir.build(seg, step.start, step.end)

    async def _descriptors(self) -> list[SegmentDescriptor]:
        kvs, _ = await self.ctx.store.get_prefix(self.ctx.keys.segments_prefix(self.name))
        out = []
        for kv in kvs:
            try:
                out.append(SegmentDescriptor.from_json(kv.json()))
            except (ValueError, TypeError) as exc:
                raise StepFailed(f"descriptor {kv.key} is malformed: {exc}", retryable=False) from exc
        return out

    def _cp_value(self, next_offset: int) -> dict[str, Any]:
        return {"next_offset": next_offset, "broker_id": self.ctx.broker_id, "at_ms": now_ms()}

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
        """The background pass: upload sealed segments (and, when the broker is dead, the whole
        intact tail, then write the final storage state). Never raises StepFailed: failures are
        counted and the topic waits its backoff."""
        try:
            if dead and self.final_epoch == death_epoch:
                return
            async with self.lock:  # also keeps the directory's caches to one thread at a time
                if not dead and not await self.refresh():
                    return
                try:
                    out = await self.pump(UNBOUNDED if dead else None)
                    if dead and out.tail_done:
                        await self._final_state(death_epoch)
                    elif dead and out.nothing_here:
                        self.final_epoch = death_epoch  # done for this death: nothing to add
                except StepFailed as exc:
                    self._failed(exc)
        finally:
            self.scheduled = False

    async def _final_state(self, death_epoch: int) -> None:
        """The broker is dead and every intact frame here is uploaded (checkpoint = true end X):
        record ``storage_state = {next_offset: X, final: true}`` for the next owner, once the
        topic is no longer owned by the dead broker and unless a later end is recorded."""
        store, keys = self.ctx.store, self.ctx.keys
        try:
            cp_kv = await store.get(self._cp_key)
            end = _checkpoint_of(cp_kv)
            if end is None:
                return
            owner_key, state_key = keys.owner(self.name), keys.storage_state(self.name)
            owner_kv = await store.get(owner_key)
            owner = owner_kv.json() if owner_kv is not None else None
            if isinstance(owner, dict) and owner.get("broker_id") == self.ctx.broker_id:
                self.progress.last_error = ""
                log.debug("topic %s: tail uploaded up to %d; waiting for its re-placement", self.name, end)
                return  # polled again by the next pass
            state_kv = await store.get(state_key)
            state = state_kv.json() if state_kv is not None else None
            recorded = int(state.get("next_offset", 0)) if isinstance(state, dict) else None
            if recorded is not None and recorded > end:
                log.info(
                    "topic %s: its recorded end %d is past this disk's %d: no final state to write",
                    self.name,
                    recorded,
                    end,
                )
                self.final_epoch = death_epoch
                return
            value = {"next_offset": end, "broker_id": self.ctx.broker_id, "final": True, "at_ms": now_ms()}
            res = await store.txn(
                [_fence(state_key, state_kv), _fence(owner_key, owner_kv), _fence(self._cp_key, cp_kv)],
                [Op.put(state_key, value)],
            )
        except DanubeError as exc:
            self._failed(
                StepFailed(f"writing the final storage state: {exc.message}", retryable=exc.retryable)
            )
            return
        if res.succeeded:
            self.final_epoch = death_epoch
            self.progress.final = True
            self.ctx.totals.final_states += 1
            log.info(
                "topic %s: broker %s is dead; its log ends at %d, all of it in object storage "
                "(final storage state written for the next owner)",
                self.name,
                self.ctx.broker_id,
                end,
            )
