"""The reliable side of a topic: its log, publish path, durable subscriptions, cursors, retention.

A :class:`~danube_broker.topic.Topic` whose metadata says ``reliable`` gets one of these when it
is first used or loaded (``Topic.adopt``; its :class:`~danube_broker.topic_storage.ReliableStorage`
opens it and serves through it). It sees the topic only through the narrow
:class:`~danube_broker.topic_storage.TopicHost` (names, epoch, the shared subscriptions,
counters, stamping). It owns:

- the topic's :class:`~danube_broker.wal.TopicLog` under ``<data_dir>/<ns>/<topic>/``;
- the **publish path**: sizes are checked by the registry; then duplicates (idempotent
  producers) are split off, the new messages are stamped (``msg_id``) and encoded, appended,
  and acknowledged **only once the append returns** (durable per the topic's durability). A
  storage error refuses the batch (nothing of it stored; reads go on);
- one :class:`SubscriptionEngine` per subscription, restored from etcd when the topic loads
  (each resumes at its cursor + 1: messages acked above the cursor before a crash come again);
- its part in the broker's **maintenance loop** (:class:`~danube_broker.dispatch.reliable.maintenance.Maintenance`,
  one for every topic): a moved cursor marks the topic dirty; its changed cursors go to etcd,
  fenced by its epoch, at most every ``cursor_flush_interval_ms``, in transactions shared with
  other topics; then retention cuts the log below what every subscription has durably
  acknowledged (unless the topic's retention keeps more), and again every
  ``retention_check_interval_s``;
- its route in the broker's **policy watch** (:class:`~danube_broker.dispatch.reliable.policy_watch.PolicyWatch`,
  one etcd watch for every topic): a changed failure policy applies at once;
- with object storage (``ReliableContext.tiering``): the log dispatch reads is a
  :class:`~danube_broker.wal.tiered.TieredLog` (object storage below the local log's first
  offset), retention never deletes what is not uploaded, and ``cloud`` durability acks a
  publish only once its batch is in object storage (:class:`~danube_broker.cloud.CloudAcks`).

Closing (unload, shutdown) stops dispatching, writes the cursors one last time (fenced), and
closes the log, whose pending commits finish first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from danube_broker.cloud import CloudAcks
from danube_broker.compaction import OBJECT_PREFIX as VIEW_OBJECT_PREFIX
from danube_broker.compaction import CompactionInfo, TopicCompaction
from danube_broker.config import BrokerConfig
from danube_broker.consumer import Consumer
from danube_broker.dispatch.base import Msg, PublishDone, PublishResult, PublishStream, SubType
from danube_broker.dispatch.reliable.acks import Ranges
from danube_broker.dispatch.reliable.cursor_batch import CursorWrite
from danube_broker.dispatch.reliable.dead_letter import DeadLetterSink
from danube_broker.dispatch.reliable.dedup import UNKNOWN_OFFSET, Dedup, PendingAppend, Split, original_offset
from danube_broker.dispatch.reliable.engine import SubscriptionEngine
from danube_broker.dispatch.reliable.log_port import TopicLogPort
from danube_broker.dispatch.reliable.maintenance import Maintenance
from danube_broker.dispatch.reliable.meta import CursorState, FencedOut, SubscriptionRecord, SubscriptionStore
from danube_broker.dispatch.reliable.policy import PolicyError, SubscriptionPolicy
from danube_broker.dispatch.reliable.policy_watch import PolicyWatch
from danube_broker.dispatch.reliable.recent import RecentMessages
from danube_broker.dispatch.reliable.retention import archive_cut, estimated_segments, retention_point
from danube_broker.producer import Producer
from danube_broker.reader import READER_POLICY, ReaderStart, resolve_start
from danube_broker.stats import TieredStats
from danube_broker.subscription import Subscription
from danube_broker.takeover import LogOpener, LogOpening
from danube_broker.tiering import Tiering
from danube_broker.wal import CommitGroup, Durability, LogClosed, StorageError, StorageFailed, WalObserver
from danube_broker.wal.remote import RemoteHistory
from danube_broker.wal.tiered import TieredLog
from danube_common.aio import cancel_and_wait
from danube_common.errors import (
    DanubeError,
    FailedPrecondition,
    OwnershipUncertain,
    TopicNotOwned,
    Unavailable,
)
from danube_common.log_state import LogRecords, LogState, Reservation, checkpoint_of, merge_sequences
from danube_common.metadata.lease import KeptLease
from danube_common.namespace_policies import COMPACTION_NAMES, RETENTION_NAMES, NamespacePolicies
from danube_common.ownership import LogClose
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.records import TopicRecord
from danube_common.resources import Resources
from danube_common.storage import incarnation_prefix

if TYPE_CHECKING:
    from danube_broker.topic_storage import TopicHost

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Later, the WAL uploader: (topic, proposed cut) -> the cut it allows (not above the proposal).
RetentionGate = Callable[[str, int], Awaitable[int]]

INITIAL_POSITIONS = ("latest", "earliest")
#: Largest window a consumer may ask for (ConsumerRequest.max_unacked_messages).
MAX_WINDOW = 100_000
#: How far back from its end the log is read to re-learn sequence ids after a restart.
DEDUP_SCAN_ENTRIES = 65_536


@dataclass(slots=True)
class ReliableContext:
    """What reliable topics need from the broker around them."""

    resources: Resources
    clock: Callable[[], float]
    #: Called when an internal task of a topic crashed: the broker stops (loudly).
    on_failure: Callable[[str, BaseException], None]
    #: The broker's one loop writing every topic's cursors and running retention.
    maintenance: Maintenance
    #: The broker's one watch on every subscription failure policy.
    policy_watch: PolicyWatch
    #: Opens a topic's log (default: ``TopicLog.open`` with the broker's ``wal`` settings).
    open_log: LogOpener | None = None
    dead_letter: DeadLetterSink | None = None
    retention_gate: RetentionGate | None = None
    #: Object storage and the WAL uploader (None: local history only, "cloud" acts as "fsync").
    tiering: Tiering | None = None
    #: The broker's registration lease: nothing is acknowledged unless it is surely alive
    #: (None: no lease, e.g. unit tests: always).
    lease: KeptLease | None = None
    #: How long a publish waits for a lease renewal once the ack deadline passed.
    renewal_wait_s: float = 1.0
    #: Told of every WAL commit and segment roll (the broker's metrics; None: nobody).
    wal_observer: WalObserver | None = None
    #: The broker's WAL commit scheduler shared by its topics (None: a writer per topic).
    commit_group: CommitGroup | None = None

    async def broker_registered(self, broker_id: str) -> bool:
        """Whether ``broker_id`` holds a registration (its lease is alive)."""
        return await self.resources.get_broker(broker_id) is not None

    def sure_of_ownership(self) -> bool:
        """The registration lease is surely alive (or there is none): deliveries may go out."""
        lease = self.lease
        return lease is None or lease.surely_alive()

    async def check_ackable(self, topic: str) -> None:
        """Raise OwnershipUncertain unless the registration lease is surely alive (waiting up to
        ``renewal_wait_s`` for a renewal): called before every acknowledgement and append."""
        lease = self.lease
        if lease is None or lease.surely_alive():
            return
        if not lease.lost.is_set() and await lease.wait_renewed(self.renewal_wait_s):
            return
        raise OwnershipUncertain(
            f"broker could not renew its registration lease in time, so it may no longer own {topic}: "
            "not acknowledging (a re-send with the same sequence ids is deduplicated); look the topic up again"
        )


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    durability: Durability
    retention_time_s: int
    retention_size_bytes: int
    #: Force the takeover from an unreachable writer after this long (0: never).
    unclean_takeover_after_s: float = 0.0
    #: Compact once this many bytes were published since the last compaction (0: only when asked).
    compaction_threshold_bytes: int = 0

    @classmethod
    def of(
        cls,
        record: TopicRecord,
        cfg: BrokerConfig,
        namespace_policies: dict[str, Any] | None = None,
        own: dict[str, Any] | None = None,
    ) -> TopicPolicies:
        """The topic's own policies (``topics set-policies``: retention), else its record's
        (written by admin at creation: every key it has wins, 0 included), else its namespace's,
        else the broker defaults (e.g. a topic auto-created by its first producer)."""
        mine = {k: own[k] for k in (*RETENTION_NAMES, *COMPACTION_NAMES) if own and own.get(k) is not None}
        p = {**(namespace_policies or {}), **(record.policies or {}), **mine}
        try:
            return cls(
                durability=Durability(p.get("durability") or cfg.default_durability),
                retention_time_s=max(0, int(p.get("retention_time_s", cfg.retention_time_s))),
                retention_size_bytes=max(0, int(p.get("retention_size_bytes", cfg.retention_size_bytes))),
                unclean_takeover_after_s=max(
                    0.0, float(p.get("unclean_takeover_after_s", cfg.unclean_takeover_after_s))
                ),
                compaction_threshold_bytes=max(
                    0, int(p.get("compaction_threshold_bytes", cfg.compaction_threshold_bytes))
                ),
            )
        except (ValueError, TypeError) as exc:
            log.error("topic %s: bad policies %r (%s); using the broker defaults", record.name, p, exc)
            return cls(
                cfg.default_durability,
                cfg.retention_time_s,
                cfg.retention_size_bytes,
                cfg.unclean_takeover_after_s,
                cfg.compaction_threshold_bytes,
            )


class ReliableTopic:
    def __init__(
        self,
        topic: TopicHost,
        log_: TopicLogPort,
        *,
        cfg: BrokerConfig,
        ctx: ReliableContext,
        policies: TopicPolicies,
        local: TopicLogPort | None = None,
        history: RemoteHistory | None = None,
        stint: LogState | None = None,
        reservation: Reservation | None = None,
    ) -> None:
        self.topic = topic
        #: What dispatch reads: the local log, or object storage + the local log (TieredLog).
        self.log = log_
        #: The local WAL alone (retention, disk figures).
        self.local = local if local is not None else log_
        self.history = history
        self.policies = policies
        self._cfg = cfg
        self._ctx = ctx
        self._records = LogRecords(ctx.resources.store, ctx.resources.keys)
        #: Our stint as recorded in etcd (None: built without the log protocol, unit tests).
        self.stint = stint
        #: Offsets at or above ``reservation.reserved_to`` are not assigned before it is extended.
        self.reservation = reservation
        self._reserve_lock = asyncio.Lock()
        #: Sequence ids stored before this stint (by earlier writers): deduplication continues.
        self._inherited = dict(stint.producer_sequences) if stint is not None else {}
        self._store = SubscriptionStore(ctx.resources, topic.topic_name, lambda: topic.epoch)
        self._dedup = Dedup(self.last_sequence)
        #: The latest published messages as objects, shared by the dispatchers (no re-parsing).
        self.recent = RecentMessages()
        #: The log's end when opened: sequence ids below it are learnt lazily (``_seed_dedup``).
        self._opened_at = log_.next_offset
        self._dedup_seeded = False
        self._seed_retry_at = 0.0
        self._seed_lock = asyncio.Lock()
        #: Held from a publish's start until its batch is in the log's queue (see ``publish``).
        self._admission = asyncio.Lock()
        #: Publishes (tasks) on their way to the log's queue: publish_now waits its turn behind them.
        self._admitting = 0
        self._defaults = cfg.default_subscription_policy()
        #: Cursor last written to etcd, per subscription.
        self._persisted: dict[str, int] = {}
        #: Object storage retention found nothing to delete in this state (acknowledgements,
        #: descriptors, limits) and nothing will be before this wall-clock time (ms): passes
        #: until then skip the computation (an idle topic in the periodic sweep).
        self._archive_quiet: tuple[Any, ...] | None = None
        self._archive_quiet_until_ms = 0.0
        #: One retention pass at a time (made at the first pass).
        self._retention_lock: asyncio.Lock | None = None
        #: The acked ranges above each persisted cursor, as written with it.
        self._persisted_acked: dict[str, Ranges] = {}
        self._flush_lock = asyncio.Lock()
        self._create_lock = asyncio.Lock()
        #: Cursor writes were refused: ownership moved on.
        self._cursors_fenced = False
        #: Our stint of the log was ended by someone else: we must not write it any more.
        self._fenced = False
        self._tasks: dict[asyncio.Task[Any], str] = {}
        #: Extends the offset reservation ahead of publishes; runs only while that is needed.
        self._reserver: asyncio.Task[Any] | None = None
        self._closed = False
        name = topic.topic_name
        tiering = ctx.tiering
        #: The compacted view (:mod:`danube_broker.compaction`); loaded by :meth:`open`.
        self.compaction = TopicCompaction(
            name,
            directory=cfg.data_path / name.namespace / name.local,
            objects=tiering.objects if tiering is not None else None,
            incarnation=stint.incarnation if stint is not None else None,
            write_record=self._write_compaction_record,
        )
        #: Bytes published since the last compaction (estimated after a restart), and the
        #: threshold that makes the retention sweep compact (inf: only when asked).
        self._uncompacted_bytes = 0
        self._compact_at = float(policies.compaction_threshold_bytes or math.inf)
        self._compaction_queued = False
        #: The compaction running now (see :meth:`compact`).
        self._compacting: asyncio.Task[CompactionInfo] | None = None
        self.cloud: CloudAcks | None = None
        if policies.durability is Durability.CLOUD:
            uploader = _cloud_uploader(ctx)
            if uploader is None:
                log.warning(
                    "topic %s has durability cloud but this broker has no WAL uploader (uploader_addr): "
                    "publishes are acked after fsync, like durability fsync",
                    topic.name,
                )
            else:
                self.cloud = CloudAcks(
                    topic.name,
                    uploader.flush,
                    lambda: self.local.durable_offset,
                    interval_s=cfg.cloud_flush_interval_s,
                    uploaded_from=stint.start_offset if stint is not None else 0,
                    on_advance=self._notify_subscriptions,
                )

    # ------------------------------------------------------------------ open / close
    @classmethod
    async def open(
        cls,
        topic: TopicHost,
        record: TopicRecord,
        *,
        cfg: BrokerConfig,
        ctx: ReliableContext,
        on_opening: Callable[[LogOpening | None], None],
    ) -> ReliableTopic:
        """Open the log (``on_opening`` is told the :class:`LogOpening` while it runs, then
        None) and restore the subscriptions."""
        name = topic.topic_name
        ns = NamespacePolicies.from_json(await ctx.resources.namespace_policies(name.namespace))
        own = await ctx.resources.store.get(ctx.resources.keys.topic_policies(name))
        policies = TopicPolicies.of(record, cfg, ns.topic_defaults(), own.json() if own is not None else None)
        directory = cfg.data_path / name.namespace / name.local
        history = await ctx.tiering.history(name) if ctx.tiering is not None else None
        opening = LogOpening(
            name,
            incarnation=record.incarnation or None,
            directory=directory,
            durability=policies.durability,
            cfg=cfg,
            resources=ctx.resources,
            epoch=lambda: topic.epoch,
            closed=lambda: topic.closed,
            history=history,
            opener=ctx.open_log,
            cloud_acks=policies.durability is Durability.CLOUD and _cloud_uploader(ctx) is not None,
            unclean_after_s=policies.unclean_takeover_after_s,
            writer_alive=ctx.broker_registered,
            wal_observer=ctx.wal_observer,
            commit_group=ctx.commit_group,
        )
        on_opening(opening)
        try:
            opened = await opening.run()
        finally:
            on_opening(None)
        local = opened.log
        log_: TopicLogPort = (
            TieredLog(local, history, floor=opened.history_floor) if history is not None else local
        )
        rt = cls(
            topic,
            log_,
            cfg=cfg,
            ctx=ctx,
            policies=policies,
            local=local,
            history=history,
            stint=opened.stint,
            reservation=opened.reservation,
        )
        try:
            await rt.compaction.load(await ctx.resources.store.get_json(ctx.resources.keys.compaction(name)))
            rt._estimate_uncompacted()
            await rt._restore()
        except BaseException:
            restored = [topic.subscriptions.pop(n) for n in list(rt._persisted) if n in topic.subscriptions]
            await rt.aclose(restored)
            raise
        log.info(
            "reliable topic %s opened: offsets %d..%d (local from %d), %d subscription(s), durability %s",
            topic.name,
            log_.first_offset,
            log_.next_offset,
            local.first_offset,
            len(rt._persisted),
            policies.durability.value,
        )
        return rt

    async def _restore(self) -> None:
        stored, revision = await self._store.load()
        for s in stored:
            rec = s.record
            try:
                sub_type = SubType(rec.type)
            except ValueError:
                log.error(
                    "topic %s: subscription %s has unknown type %r; skipped",
                    self.topic.name,
                    rec.name,
                    rec.type,
                )
                continue
            policy = self._policy(rec.name, s.policy)
            self._add_subscription(
                rec.name,
                sub_type,
                cursor=s.cursor,
                policy=policy,
                acked=s.acked,
                read_compacted=rec.read_compacted,
            )
        await self._follow_policies(revision)
        self._ctx.maintenance.register(self)
        self.local.on_sealed(partial(self._ctx.maintenance.sealed, self))
        if self.cloud is not None:
            self._spawn(self.cloud.run(), "the cloud ack flusher")

    @property
    def name(self) -> str:
        return self.topic.name

    def stop(self) -> None:
        """Stop dispatching at once (synchronous part of closing)."""
        self._closed = True
        self._ctx.maintenance.unregister(self)
        self.local.on_sealed(None)
        self._ctx.policy_watch.unfollow(self.topic.topic_name, self)
        for sub in self.topic.subscriptions.values():
            task = sub.engine.task if sub.engine is not None else None
            if task is not None:
                task.cancel()
        for task in self._tasks:
            task.cancel()
        if self._compacting is not None:
            self._compacting.cancel()

    async def aclose(self, subscriptions: list[Subscription] | None = None) -> None:
        """Stop dispatching, write the cursors one last time, close the log. Idempotent."""
        self.stop()
        await cancel_and_wait(*self._tasks)
        if self._compacting is not None:
            with contextlib.suppress(BaseException):  # its failure was its callers' (and logged)
                await self._compacting
        subs = subscriptions if subscriptions is not None else list(self.topic.subscriptions.values())
        for sub in subs:
            if sub.engine is not None:
                await sub.engine.aclose()
        await self.flush_cursors(subs)
        if self.cloud is not None:
            self.cloud.close(
                Unavailable(
                    f"topic {self.topic.name} closed before object storage confirmed the batch (it is stored "
                    "in the log; a re-send with the same sequence ids is deduplicated)"
                )
            )
        await self.log.aclose()

    async def discard_if_deleted(self) -> None:
        """After closing: if the topic was deleted meanwhile (or deleted and created again: another
        incarnation), remove its local WAL and its objects. A topic created again under the name
        never sees them anyway (its incarnation differs); this frees the space."""
        mine = self.stint.incarnation if self.stint is not None else None
        if mine is None:
            return
        try:
            rec = await self._ctx.resources.get_topic(self.topic.topic_name)
        except DanubeError:
            return
        if rec is not None and rec.incarnation == mine:
            return
        directory = getattr(self.local, "directory", None)
        if isinstance(directory, Path):
            await asyncio.to_thread(shutil.rmtree, directory, True)
        tiering = self._ctx.tiering
        objects = tiering.objects if tiering is not None else None
        removed = 0
        if objects is not None:
            try:
                prefix = incarnation_prefix(self.topic.topic_name, mine)
                for info in [*await objects.list(prefix), *await objects.list(VIEW_OBJECT_PREFIX + prefix)]:
                    await objects.delete(info.key)
                    removed += 1
            except DanubeError as exc:
                log.warning("topic %s was deleted; removing its objects failed: %s", self.topic.name, exc)
        log.info(
            "topic %s was deleted: its local log%s removed",
            self.topic.name,
            f" and {removed} object(s)" if removed else "",
        )

    def _spawn(self, coro: Awaitable[Any], what: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks[task] = what
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        what = self._tasks.pop(task, "a task")
        if task.cancelled() or self._closed:
            return
        exc = task.exception()
        if exc is not None:
            self._ctx.on_failure(f"{what} of reliable topic {self.topic.name}", exc)

    # ------------------------------------------------------------------ publish
    async def publish(
        self, producer: Producer, msgs: list[Msg], nbytes: int, *, stream: PublishStream | None = None
    ) -> PublishResult:
        """Store ``msgs`` (``nbytes`` of payload; minus duplicates); return once durable.

        Calls enter the log in call order, also when one waits (for dedup seeding, or for room
        in the log): the part up to the log's queue runs under ``_admission`` (a FIFO lock,
        free on the hot path), the wait for durability outside it. So a publish stream can keep
        several batches in flight and they share group commits. ``stream``: the publish stream's
        order guard (see :class:`~danube_broker.dispatch.base.PublishStream`)."""
        try:
            return await self._publish(producer, msgs, nbytes, stream)
        except StorageError:
            if stream is not None:
                stream.refused = True  # later batches of the stream must not overtake this one
            raise

    def publish_now(
        self,
        producer: Producer,
        msgs: list[Msg],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
    ) -> bool:
        """:meth:`publish` without a task of its own, for the common case where nothing needs
        waiting for: the lease is surely alive, no other publish of the topic is being admitted,
        the log has room, no message is a duplicate, no reservation extension or upload wait.
        False, having done nothing, when that is not the case (call :meth:`publish`). True once
        the batch is queued: ``done(result, None)`` or ``done(None, error)`` is then called once,
        from a callback, with what :meth:`publish` would have returned or raised.

        Cheaper than the task (at 1,000 topics most batches hold one message, so a batch's fixed
        cost is the message's), and two event-loop turns shorter from commit to ack. ``stream``'s
        earlier batches must all be queued already (the caller's business: order)."""
        if (
            self._admitting
            or self._admission.locked()
            or self._fenced
            or self.cloud is not None
            or stream.refused
            or not self._ctx.sure_of_ownership()
        ):
            return False
        failures = self.local.failed_commits
        if stream.seen_failures is not None and failures != stream.seen_failures:
            return False  # _keep_order refuses it: the task says so
        log_ = self.log
        res = self.reservation
        if (res is not None and log_.next_offset + len(msgs) > res.reserved_to) or not log_.has_room():
            return False
        split = self._dedup.split_new(producer.name, msgs)
        if split is None:
            return False  # duplicates: the task looks up their originals
        stream.seen_failures = failures
        records, sizes, times, seqs = self._stamped(producer, msgs, log_.next_offset, with_seqs=False)
        try:
            durable = log_.enqueue_now(records, times, seqs, unless_failed_since=failures)
        except Exception as exc:
            self._not_queued(producer.name, split.append, msgs, exc)
            if isinstance(exc, StorageError):
                stream.refused = True
            asyncio.get_running_loop().call_soon(done, None, exc)
            return True
        durable.add_done_callback(partial(self._settled, producer.name, split.append))
        durable.add_done_callback(partial(self._durable_now, msgs, sizes, nbytes, stream, done))
        return True

    def _durable_now(
        self,
        msgs: list[Msg],
        sizes: list[int],
        nbytes: int,
        stream: PublishStream,
        done: PublishDone,
        durable: asyncio.Future[int],
    ) -> None:
        """The commit of a :meth:`publish_now` batch ended (after ``_settled``)."""
        if durable.cancelled():  # the log does not cancel it; should it ever, nothing is known
            done(None, Unavailable("the commit of the batch was cancelled; re-send it"))
            return
        exc = durable.exception()
        if exc is not None:
            if isinstance(exc, StorageError):
                stream.refused = True  # later batches of the stream must not overtake this one
            done(None, exc)
            return
        first = durable.result()
        try:
            self._durable(first, msgs, sizes, nbytes)
        except Exception as exc:
            done(None, exc)
            return
        result = PublishResult(first, len(msgs))
        if self._ctx.sure_of_ownership():
            done(result, None)
        else:
            self._spawn(self._ack_when_sure(result, done), "an acknowledgement")

    async def _ack_when_sure(self, result: PublishResult, done: PublishDone) -> None:
        try:
            await self._ctx.check_ackable(self.topic.name)
        except Exception as exc:
            done(None, exc)
        except BaseException:
            done(None, Unavailable("the broker is stopping; re-send"))
            raise
        else:
            done(result, None)

    async def _publish(
        self, producer: Producer, msgs: list[Msg], nbytes: int, stream: PublishStream | None
    ) -> PublishResult:
        self._admitting += 1  # until queued in the log: publish_now must not overtake it
        try:
            split, first, sizes, durable = await self._admit(producer, msgs, stream)
        finally:
            self._admitting -= 1
        new = split.new
        if durable is not None:
            first = await asyncio.shield(durable)  # StorageError/LogClosed: nothing of it stored
            self._durable(
                first, new, sizes, nbytes if len(new) == len(msgs) else sum(len(m.payload) for m in new)
            )
            if self.cloud is not None:
                await self.cloud.wait_uploaded(first + len(new))
        if not split.duplicates:
            await self._ctx.check_ackable(self.topic.name)
            return PublishResult(first, len(new))
        offsets = [0] * len(msgs)
        dup_at = {i for i, _ in split.duplicates}
        it = iter(range(first, first + len(new)))
        for i in range(len(msgs)):
            if i not in dup_at:
                offsets[i] = next(it)
        for i, where in split.duplicates:
            offsets[i] = await original_offset(where)
        if self.cloud is not None:
            known = [o for o in offsets if o != UNKNOWN_OFFSET]
            if known:
                await self.cloud.wait_uploaded(max(known) + 1)
        await self._ctx.check_ackable(self.topic.name)
        return PublishResult(first, len(msgs), offsets, len(split.duplicates))

    async def _admit(
        self, producer: Producer, msgs: list[Msg], stream: PublishStream | None
    ) -> tuple[Split, int, list[int], asyncio.Future[int] | None]:
        """The part of a publish up to the log's queue: split off duplicates, stamp and queue the
        new messages; their first offset, record sizes and future (None if there are none). Calls enter the log in call order,
        also when one waits (for the lease, dedup seeding or room in the log)."""
        async with self._admission:
            await self._ctx.check_ackable(self.topic.name)
            if self._fenced:
                raise self._fenced_error()
            if stream is not None:
                self._keep_order(stream)
            split = self._dedup.split(producer.name, msgs)
            if not self._dedup_seeded and any(where is None for _, where in split.duplicates):
                await self._seed_dedup()
                split.duplicates = [
                    (
                        i,
                        where
                        if where is not None
                        else self._dedup.lookup(producer.name, msgs[i].sequence_id),
                    )
                    for i, where in split.duplicates
                ]
            new = split.new
            first = self.log.next_offset
            durable: asyncio.Future[int] | None = None
            sizes: list[int] = []
            if new and self.reservation is not None and first + len(new) > self.reservation.reserved_to:
                try:
                    await self._reserve(first + len(new))
                except BaseException:
                    self._dedup.failed(producer.name, split.append)
                    split.append.failed(Unavailable("the offset reservation could not be extended; retry"))
                    raise
            if new:
                records, sizes, times, seqs = self._stamped(
                    producer, new, first, with_seqs=bool(split.duplicates)
                )
                # The WAL assigns offsets at the call, in call order, and only this lock's holder
                # appends, so the stamped offsets are the real ones unless the WAL makes the
                # call wait for room first (deliveries take the offset from the log entry).
                queued = self.log.enqueue(
                    records,
                    times,
                    seqs,
                    unless_failed_since=stream.seen_failures if stream is not None else None,
                )
                durable = await self._appending(producer.name, split.append, new, queued)
                # Settled when the commit ends, whether or not this call is still waiting (a
                # client that went away): duplicates of the batch learn its offset or its failure.
                durable.add_done_callback(partial(self._settled, producer.name, split.append))
        return split, first, sizes, durable

    def last_sequence(self, producer_name: str) -> int:
        """Highest sequence id stored for ``producer_name`` on this topic, by this broker or the
        writers before it (0: none)."""
        return max(self.log.last_sequence(producer_name), self._inherited.get(producer_name, 0))

    # ------------------------------------------------------------------ offset reservation
    async def _reserve(self, needed: int) -> None:
        """Extend the reservation so that offsets below ``needed`` may be assigned."""
        async with self._reserve_lock:
            res, stint = self.reservation, self.stint
            if res is None or stint is None or needed <= res.reserved_to:
                return
            if self._fenced:
                raise self._fenced_error()
            target = max(needed, self.log.next_offset) + self._cfg.offset_reservation_block
            new = await self._records.extend_reservation(self.topic.topic_name, stint, res, target)
            if new is None:
                self._fence_out("the log record changed: another broker took the topic's log over")
                raise self._fenced_error()
            self.reservation = new

    def _reserve_soon(self) -> None:
        """Publishes came within half a block of the reservation's end: extend it in the
        background (a task that ends once the reservation is ahead again: none while idle)."""
        if self._closed or (self._reserver is not None and not self._reserver.done()):
            return
        self._reserver = self._spawn(self._reserve_ahead(), "the offset reservation loop")

    async def _reserve_ahead(self) -> None:
        """Extend the reservation before publishes reach it (half a block ahead)."""
        while True:
            res = self.reservation
            if res is None or self._fenced:
                return
            if self.log.next_offset + self._cfg.offset_reservation_block // 2 < res.reserved_to:
                return
            try:
                await self._ctx.check_ackable(self.topic.name)
                await self._reserve(res.reserved_to + 1)
            except DanubeError as exc:
                if self._fenced:
                    return
                log.warning(
                    "topic %s: extending the offset reservation failed (%s); retrying", self.topic.name, exc
                )
                await asyncio.sleep(1.0)

    async def _still_owned(self) -> bool:
        """Whether the owner key still names this broker (then adopt its current epoch)."""
        try:
            own = await self._ctx.resources.get_owner(self.topic.topic_name)
        except DanubeError:
            return True  # unknown: try again later
        if own is None or own.broker_id != self._cfg.broker_id:
            return False
        self.topic.epoch = max(self.topic.epoch, own.epoch)
        return True

    def _fence_out(self, why: str) -> None:
        if not self._fenced:
            self._fenced = True
            log.warning("topic %s: %s; this broker stops writing it", self.topic.name, why)

    def _fenced_error(self) -> TopicNotOwned:
        return TopicNotOwned(
            f"topic {self.topic.name} is no longer written by this broker (its ownership moved on); look it up again"
        )

    def close_txn(self, next_offset: int, closed_by: str) -> LogClose | None:
        """The compare and put that record where our stint of the log ends (None: no stint)."""
        if self.stint is None:
            return None
        sequences = merge_sequences(self._inherited, self.local.producer_sequences())
        return self._records.close_txn(
            self.topic.topic_name,
            self.stint,
            next_offset=next_offset,
            closed_by=closed_by,
            sequences=sequences,
        )

    def _keep_order(self, stream: PublishStream) -> None:
        """Refuse the stream's batch if a commit of the log failed since its previous batch was
        admitted (that batch may be among the failed): later batches are never stored before an
        earlier refused one."""
        failures = self.local.failed_commits
        if stream.refused or (stream.seen_failures is not None and failures != stream.seen_failures):
            stream.refused = True
            raise StorageFailed(
                f"topic {self.topic.name}: a commit failed after an earlier batch of this publish stream was "
                "admitted, so it may not be stored; this batch is refused to keep the stream's order: re-send "
                "from the first refused batch, in order"
            )
        if stream.seen_failures is None:
            stream.seen_failures = failures

    def _settled(self, producer_name: str, append: PendingAppend, fut: asyncio.Future[int]) -> None:
        if fut.cancelled():
            self._dedup.failed(producer_name, append)
            append.failed(Unavailable("the commit of the original of this duplicate was cancelled; retry"))
            return
        exc = fut.exception()
        if exc is None:
            self._dedup.stored(producer_name, append, fut.result())
        else:
            self._dedup.failed(producer_name, append)
            append.failed(exc)

    async def _appending(
        self, producer_name: str, append: PendingAppend, new: list[Msg], step: Awaitable[T]
    ) -> T:
        """Await the queueing step of an append, undoing the batch's dedup bookkeeping when it
        fails (nothing stored) or is cancelled."""
        try:
            return await step
        except BaseException as exc:
            self._not_queued(producer_name, append, new, exc)
            raise

    def _not_queued(
        self, producer_name: str, append: PendingAppend, new: list[Msg], exc: BaseException
    ) -> None:
        """Queueing ``new`` raised ``exc``: undo the batch's dedup bookkeeping."""
        if isinstance(exc, (StorageError, LogClosed)):  # nothing of the batch was stored
            self._dedup.failed(producer_name, append)
            append.failed(exc)
        else:  # cancelled (the WAL keeps what it had accepted), or refused before the log
            self._abandoned(producer_name, append, new)

    async def _seed_dedup(self) -> None:
        """Once per open, on the first duplicate whose original is not remembered (a producer
        re-sending after a restart): learn sequence ids -> offsets from the log's tail."""
        async with self._seed_lock:
            if self._dedup_seeded or time.monotonic() < self._seed_retry_at:
                return
            self._dedup_seeded = True
            end = self._opened_at
            pos = max(self.log.first_offset, end - DEDUP_SCAN_ENTRIES)
            found: dict[str, list[tuple[int, int]]] = {}
            try:
                while pos < end:
                    entries = await self.log.read_async(pos, min(4096, end - pos))
                    if not entries:
                        break
                    for e in entries:
                        if e.offset >= end:
                            break
                        m = pb.StreamMessage.FromString(e.record)
                        if m.sequence_id:
                            found.setdefault(m.producer_name, []).append((m.sequence_id, e.offset))
                    pos = entries[-1].offset + 1
            except DanubeError as exc:
                # E.g. the previous owner's tail is still on its way to object storage: try again
                # on a later duplicate (this one is acked with an unknown offset).
                log.warning(
                    "topic %s: could not read the log's tail for dedup (%s); trying again later",
                    self.topic.name,
                    exc,
                )
                self._dedup_seeded = exc.retryable is False
                self._seed_retry_at = time.monotonic() + 1.0
            for name, pairs in found.items():
                self._dedup.seed(name, pairs)

    def _abandoned(self, producer_name: str, append: PendingAppend, new: list[Msg]) -> None:
        """The publish was cancelled while appending (the client went away).

        If the WAL had accepted the batch (its sequence ids are in ``last_sequence``) it will be
        stored: re-sends are duplicates, acked with an unknown offset. Otherwise nothing was
        stored and re-sends are new. Duplicates waiting on this batch get a retryable error.
        """
        top = max((m.sequence_id for m in new), default=0)
        if top and self.log.last_sequence(producer_name) < top:
            self._dedup.failed(producer_name, append)
        else:
            self._dedup.forget(producer_name, append)
        append.failed(
            Unavailable("the original of this duplicate was being published by a cancelled call; retry")
        )

    def _deliverable(self) -> int:
        """A ``cloud`` topic delivers only what object storage confirmed (what a dead broker had
        not uploaded is given up, and its offsets reused: no consumer may have seen it)."""
        cloud = self.cloud
        durable = self.log.durable_offset
        return durable if cloud is None else min(durable, cloud.uploaded_next_offset)

    def _notify_subscriptions(self) -> None:
        for sub in self.topic.subscriptions.values():
            if sub.engine is not None:
                sub.engine.notify()

    def _stamped(
        self, producer: Producer, new: list[Msg], first: int, *, with_seqs: bool
    ) -> tuple[list[bytes], list[int], list[int], list[tuple[str, int]] | None]:
        """Stamp ``new`` at offsets from ``first``; their records, sizes, publish times and
        (producer, sequence id) pairs (None when no message has one, unless ``with_seqs``)."""
        self.topic.stamp(producer, new, first, int(time.time() * 1000))
        records = [m.SerializeToString() for m in new]
        seqs = (
            [(producer.name, m.sequence_id) for m in new]
            if with_seqs or any(m.sequence_id for m in new)
            else None
        )
        return records, [len(r) for r in records], [m.publish_time for m in new], seqs

    def _durable(self, first: int, msgs: list[Msg], sizes: list[int], nbytes: int) -> None:
        """``msgs`` are durable at ``first``: published, and the offset reservation extended
        ahead of need."""
        self._published(first, msgs, sizes, nbytes)
        if self.reservation is not None and (
            self.log.next_offset + self._cfg.offset_reservation_block // 2 >= self.reservation.reserved_to
        ):
            self._reserve_soon()

    def _published(self, first: int, msgs: list[Msg], sizes: list[int], nbytes: int) -> None:
        """``msgs`` are durable at ``first``...: counted, kept for the dispatchers (see
        :mod:`~danube_broker.dispatch.reliable.recent`), and the dispatchers woken."""
        self.topic.count_in(len(msgs), nbytes)
        self._uncompacted_bytes += nbytes
        if self._uncompacted_bytes >= self._compact_at and not self._compaction_queued:
            self._compaction_queued = True
            self._ctx.maintenance.sealed(self)  # the retention sweep compacts it
        engines = [sub.engine for sub in self.topic.subscriptions.values() if sub.engine is not None]
        recent = self.recent
        # Kept for the subscriptions that read the tail; one further behind (no consumer, a
        # backlog) parses what it reads, and holds nothing here.
        near = [e.read_pos for e in engines if e.read_pos >= first - recent.max_entries]
        recent.trim(min(near, default=first + len(msgs)))
        if near:
            for i, m in enumerate(msgs):
                if m.msg_id.topic_offset != first + i:  # the WAL made the call wait: not stamped right
                    m.msg_id.topic_offset = first + i
            recent.add(first, msgs, sizes)
        for engine in engines:
            try:
                engine.dispatch_now()
            except Exception:  # a dispatcher's bug must not fail a publish that is stored
                log.exception(
                    "topic %s: delivering at publish time failed; its dispatcher retries", self.topic.name
                )
                engine.notify()

    # ------------------------------------------------------------------ subscriptions
    async def subscribe(
        self,
        *,
        subscription: str,
        consumer_name: str,
        sub_type: SubType,
        key_filters: tuple[str, ...],
        new_id: int,
        now: float,
        initial_position: str = "latest",
        max_unacked: int = 0,
        read_compacted: bool = False,
    ) -> Consumer:
        """Attach a consumer to a durable subscription, created (with ``initial_position`` and
        ``read_compacted``) if new; an existing one keeps what it was created with."""
        window = min(max_unacked, MAX_WINDOW) if max_unacked else self._cfg.max_unacked_messages_per_consumer
        sub = self.topic.subscriptions.get(subscription)
        if sub is None:
            async with self._create_lock:
                sub = self.topic.subscriptions.get(subscription)
                if sub is None:
                    sub = await self._create(subscription, sub_type, initial_position, read_compacted)
        self.topic.check_open()
        if sub.non_durable:
            raise FailedPrecondition(
                f"{subscription!r} is a reader of {self.topic.name} (not stored); use another subscription name"
            )
        return sub.attach(
            consumer_name=consumer_name,
            sub_type=sub_type,
            key_filters=key_filters,
            new_id=new_id,
            now=now,
            window=window,
        )

    async def _create(
        self, name: str, sub_type: SubType, initial_position: str, read_compacted: bool = False
    ) -> Subscription:
        if initial_position not in INITIAL_POSITIONS:
            raise FailedPrecondition(f"unknown initial position {initial_position!r}: use latest or earliest")
        start = self.log.next_offset if initial_position == "latest" else self.earliest_offset(read_compacted)
        record = SubscriptionRecord(
            name, sub_type.value, int(time.time() * 1000), initial_position, start, read_compacted
        )
        await self._store.create(record)
        policy = self._policy(name, await self._store.read_policy(name))
        self.topic.check_open()
        log.info(
            "subscription %s on %s created (%s, %s: from offset %d%s)",
            name,
            self.topic.name,
            sub_type.value,
            initial_position,
            start,
            ", compacted view" if read_compacted else "",
        )
        return self._add_subscription(
            name, sub_type, cursor=start - 1, policy=policy, read_compacted=read_compacted
        )

    def earliest_offset(self, read_compacted: bool) -> int:
        """Where ``earliest`` starts: the log's first offset, or for the compacted view its
        oldest entry when older (retention may have cut the log below it)."""
        first = self.log.first_offset
        view = self.compaction.view if read_compacted else None
        return min(first, view.first_offset) if view is not None else first

    async def subscribe_reader(
        self,
        *,
        subscription: str,
        consumer_name: str,
        start: ReaderStart,
        new_id: int,
        now: float,
        max_unacked: int,
        read_compacted: bool = False,
    ) -> Consumer:
        """A reader (:mod:`danube_broker.reader`): a non-durable exclusive subscription at
        ``start``; an existing reader subscription of that name is taken over and repositioned.
        ``read_compacted``: it reads the compacted view below its horizon (asked at each attach)."""
        window = min(max_unacked, MAX_WINDOW) if max_unacked else self._cfg.max_unacked_messages_per_consumer
        offset = await resolve_start(start, self.log)
        if start.kind == "earliest":
            offset = self.earliest_offset(read_compacted)
        self.topic.check_open()
        sub = self.topic.subscriptions.get(subscription)
        if sub is not None and not sub.non_durable:
            raise FailedPrecondition(
                f"{subscription!r} is a durable subscription of {self.topic.name}; a reader needs a name "
                "of its own (readers are not stored)"
            )
        existing = sub is not None
        if sub is None:
            sub = self._add_subscription(
                subscription,
                SubType.EXCLUSIVE,
                cursor=offset - 1,
                policy=READER_POLICY,
                durable=False,
                read_compacted=read_compacted,
            )
            sub.non_durable = True
            log.info(
                "reader %s on %s opened at %s: offset %d",
                subscription,
                self.topic.name,
                start.describe(),
                offset,
            )
        consumer = sub.attach(
            consumer_name=consumer_name,
            sub_type=SubType.EXCLUSIVE,
            key_filters=(),
            new_id=new_id,
            now=now,
            window=window,
        )
        if existing and sub.engine is not None:
            sub.engine.use_compaction(self.compaction if read_compacted else None)
            # Re-attaching: continue where the reader asks. Always a seek, even at the engine's
            # read position: what the old stream held is queued for redelivery below it, and the
            # reader would drop those copies without acknowledging them.
            offset = sub.engine.seek(offset)
        sub.reader_start = offset
        return consumer

    def drop_reader(self, sub: Subscription) -> None:
        """A reader's subscription lost its consumer (already removed from the topic): stop its
        dispatcher. Nothing durable to delete."""
        if sub.engine is not None:
            self._spawn(sub.engine.aclose(), f"closing reader {sub.name}")
        log.info("reader %s on %s closed", sub.name, self.topic.name)

    def _add_subscription(
        self,
        name: str,
        sub_type: SubType,
        *,
        cursor: int,
        policy: SubscriptionPolicy,
        durable: bool = True,
        acked: Ranges = (),
        read_compacted: bool = False,
    ) -> Subscription:
        topic = self.topic
        sub = Subscription(
            topic_name=topic.name,
            name=name,
            sub_type=sub_type,
            queue_messages=self._cfg.max_unacked_messages_per_consumer,
            on_space=None,
            topic_counters=topic.counters,
            now=self._ctx.clock(),
        )
        engine = SubscriptionEngine(
            sub,
            self.log,
            policy=policy,
            cursor=cursor,
            clock=self._ctx.clock,
            topic_counters=topic.counters,
            on_cursor=self._cursor_moved,
            dead_letter=self._ctx.dead_letter,
            max_pending=self._cfg.max_pending_messages_per_subscription,
            max_delayed=self._cfg.max_delayed_messages_per_subscription,
            deliverable=self._deliverable if self.cloud is not None else None,
            recent=self.recent,
            may_deliver=self._ctx.sure_of_ownership,
            acked=acked,
            compaction=self.compaction if read_compacted else None,
        )
        sub.engine = engine
        if durable:
            self._persisted[name] = cursor
            self._persisted_acked[name] = acked
        topic.subscriptions[name] = sub
        task = engine.start()
        self._tasks[task] = f"the dispatcher of subscription {name}"
        task.add_done_callback(self._task_done)
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        """Delete the subscription: stop its engine, remove its metadata and cursor (fenced)."""
        if sub.engine is not None:
            await sub.engine.aclose()
        async with self._flush_lock:  # no cursor write of it in flight: none lands after the delete
            self._persisted.pop(sub.name, None)
            self._persisted_acked.pop(sub.name, None)
            await self._store.delete(sub.name)
        log.info("subscription %s on %s deleted (unsubscribed)", sub.name, self.topic.name)

    # ------------------------------------------------------------------ policies
    def _policy(self, name: str, stored: dict[str, Any] | None) -> SubscriptionPolicy:
        try:
            return self._defaults.merged(stored)
        except PolicyError as exc:
            log.error(
                "subscription %s on %s: stored failure policy ignored (%s); using the defaults",
                name,
                self.topic.name,
                exc,
            )
            return self._defaults

    async def _follow_policies(self, revision: int) -> None:
        """Join the broker's policy watch from ``revision`` (what ``_restore`` read); if the
        watch already passed it, read this topic's policies again first."""
        while not self._ctx.policy_watch.follow(self.topic.topic_name, self, revision):
            stored, revision = await self._store.read_policies()
            self.policies_reloaded(stored)

    def policies_reloaded(self, stored: dict[str, dict[str, Any]]) -> None:
        """Every policy of the topic, read again (the policy watch was compacted)."""
        for name in list(self.topic.subscriptions):
            self.policy_changed(name, stored.get(name))

    def policy_changed(self, name: str, stored: dict[str, Any] | None) -> None:
        sub = self.topic.subscriptions.get(name)
        if sub is None or sub.engine is None or sub.non_durable:
            return
        policy = self._policy(name, stored)
        if policy != sub.engine.policy:
            log.info("subscription %s on %s: failure policy now %s", name, self.topic.name, policy)
            sub.engine.set_policy(policy)

    # ------------------------------------------------------------------ cursors and retention
    def _cursor_moved(self) -> None:
        self._ctx.maintenance.mark_dirty(self)

    async def flush_cursors(self, subs: list[Subscription] | None = None) -> None:
        """Write every changed cursor of this topic in one fenced transaction, now (closing;
        failures are retried by the maintenance loop while the topic is open)."""
        async with self._flush_lock:
            changed = self._changed_cursors(subs)
            if changed:
                await self._write_cursors(changed)

    def _changed_cursors(self, subs: list[Subscription] | None = None) -> dict[str, CursorState]:
        """Subscriptions whose cursor, or acked ranges above it, changed since they were written."""
        if self._cursors_fenced:
            return {}
        changed: dict[str, CursorState] = {}
        persisted, persisted_acked = self._persisted, self._persisted_acked
        for sub in subs if subs is not None else list(self.topic.subscriptions.values()):
            engine, name = sub.engine, sub.name
            if engine is None or name not in persisted:
                continue
            acked = engine.acks.persistable()
            if engine.cursor != persisted[name] or acked != persisted_acked.get(name, ()):
                changed[name] = (engine.cursor, acked)
        return changed

    def _remember(self, written: dict[str, CursorState]) -> None:
        for name, (cursor, acked) in written.items():
            self._persisted[name] = cursor
            self._persisted_acked[name] = acked

    async def _write_cursors(self, changed: dict[str, CursorState]) -> bool:
        """This topic's cursors alone, fenced by its epoch (the flush lock is held)."""
        try:
            await self._store.write_cursors(changed)
        except FencedOut as exc:
            if await self._still_owned():
                self._cursor_moved()  # our epoch moved on (e.g. a move was marked): write again
                return False
            self._cursors_fenced = True
            log.warning("%s; cursors are no longer written", exc.message)
            return False
        except DanubeError as exc:
            log.warning(
                "topic %s: writing %d cursor(s) failed (%s); retrying", self.topic.name, len(changed), exc
            )
            self._cursor_moved()
            return False
        self._remember(changed)
        return True

    # The maintenance loop's side of a flush (see Maintenance.Maintained).
    async def begin_cursor_flush(self) -> CursorWrite[Any] | None:
        lock = self._flush_lock
        if lock.locked():  # a flush of this topic is under way (closing): it writes what moved
            self._cursor_moved()
            return None
        await lock.acquire()  # free: taken at once, no other task runs in between
        changed = self._changed_cursors()
        if not changed:
            lock.release()
            return None
        return CursorWrite(self, self._store.fence(), self._store.cursor_ops(changed), changed)

    async def end_cursor_flush(self, write: CursorWrite[Any], outcome: bool | DanubeError) -> bool:
        try:
            if outcome is True:
                self._remember(write.changed)
                return True
            if outcome is False:  # alone: refused if ownership moved on, as before
                return await self._write_cursors(write.changed)
            self._cursor_moved()
            return False
        finally:
            self._flush_lock.release()

    def abort_cursor_flush(self, write: CursorWrite[Any]) -> None:
        self._cursor_moved()
        self._flush_lock.release()

    def retention_due(self) -> bool:
        """Only sealed segments are ever cut: a log with none (an idle topic's usual case) has
        nothing for :meth:`apply_retention`, unless retention limits apply to its uploaded
        history (which always keeps its newest segment), or a compaction is due."""
        return self.local.segment_count > 1 or self._archive_due() or self._compaction_queued

    def _archive_due(self) -> bool:
        h, pol, tiering = self.history, self.policies, self._ctx.tiering
        return (
            h is not None
            and len(h.descriptors) > 1
            and (pol.retention_time_s > 0 or pol.retention_size_bytes > 0)
            and tiering is not None
            and tiering.objects is not None
        )

    def retention_changed(self) -> None:
        """The topic's retention limits changed: the periodic sweep looks at it again."""
        self._ctx.maintenance.sealed(self)

    async def apply_retention(self) -> None:
        """Cut the local log below what every subscription durably acknowledged (retention
        permitting; with object storage, never above the uploader's checkpoint); then, with a
        retention limit, the uploaded history (:meth:`_archive_retention`). One pass at a time:
        a call during another waits for it (its deletions included), then looks again. A
        compaction due (the threshold policy) is started first, in the background: the sweep
        never waits for it (the next pass cuts with its horizon)."""
        if self._compaction_queued and not self._closed:
            self._start_compaction()
        if self._retention_lock is None:
            self._retention_lock = asyncio.Lock()
        async with self._retention_lock:
            await self._local_retention()
            if self._archive_due():
                await self._archive_retention()

    async def _archive_retention(self) -> None:
        """Delete the uploaded segments retention lets go: their descriptors first, in a
        transaction fenced on this broker's epoch (a former owner deletes nothing), then their
        objects. An object left behind (a crash or a store error in between) is an orphan no
        reader can reach; the next pass that deletes something removes it
        (``Tiering.delete_history``)."""
        history, tiering = self.history, self._ctx.tiering
        assert history is not None and tiering is not None
        pol = self.policies
        acked = [c + 1 for c in self._persisted.values()]
        acked_before = min(acked) if acked else None
        descs = history.descriptors
        now_ms = time.time() * 1000
        state = (
            acked_before,
            len(descs),
            descs[0].start_offset,
            descs[-1].next_offset,
            pol.retention_time_s,
            pol.retention_size_bytes,
            self._retention_cap(),
        )
        if state == self._archive_quiet and now_ms < self._archive_quiet_until_ms:
            return
        victims = archive_cut(
            descs,
            acked_before=acked_before,
            now_ms=int(now_ms),
            retention_time_s=pol.retention_time_s,
            retention_size_bytes=pol.retention_size_bytes,
        )
        cap = self._retention_cap()
        if cap is not None:
            victims = [d for d in victims if d.next_offset <= cap]  # the oldest first: still a prefix
        if not victims:
            # Only the clock can change the answer, and only while the oldest segment is
            # younger than the time limit (else an acknowledgement, an upload or the limits
            # hold it back: all in ``state``).
            oldest = descs[0].max_publish_time_ms
            due = (
                oldest + pol.retention_time_s * 1000 if pol.retention_time_s > 0 and oldest > 0 else math.inf
            )
            self._archive_quiet = state
            self._archive_quiet_until_ms = due if due > now_ms else math.inf
            return
        self._archive_quiet = None
        keys = [self._ctx.resources.keys.segment(self.topic.topic_name, d.start_offset) for d in victims]
        try:
            await self._store.delete_keys(keys, f"deleting {len(keys)} segment descriptor(s) (retention)")
        except FencedOut as exc:
            log.info("%s: retention leaves object storage to the new owner", exc.message)
            return
        point = victims[-1].next_offset
        history.cut_below(point, victims)
        kept = history.descriptors[0] if history.descriptors else None
        nbytes = sum(d.size_bytes for d in victims)
        if self._ctx.wal_observer is not None:
            self._ctx.wal_observer.history_deleted(len(victims), nbytes)
        deleted = await tiering.delete_history(self.topic.topic_name, victims, kept)
        log.info(
            "topic %s: retention deleted offsets %d..%d from object storage (%d segment(s), %d bytes; %d object(s))",
            self.topic.name,
            victims[0].start_offset,
            point - 1,
            len(victims),
            nbytes,
            deleted,
        )

    async def _local_retention(self) -> None:
        log_ = self.local
        if log_.segment_count <= 1:
            return  # nothing sealed: nothing to cut
        stats = log_.stats()
        pol = self.policies
        acked = [c + 1 for c in self._persisted.values()]
        time_point = None
        if pol.retention_time_s:
            time_point = await log_.offset_for_time(int(time.time() * 1000) - pol.retention_time_s * 1000)
        segments = estimated_segments(
            log_.first_offset, log_.next_offset, stats.bytes_on_disk, stats.segments
        )
        point = retention_point(
            first_offset=log_.first_offset,
            next_offset=log_.durable_offset,
            acked_before=min(acked) if acked else None,
            time_point=time_point,
            size_limit_bytes=pol.retention_size_bytes,
            segments=segments,
        )
        cap = self._retention_cap()
        if cap is not None and self.history is None:
            point = min(point, cap)  # no other copy: compaction first
        if point <= log_.first_offset:
            return  # nothing to cut (the gate could only lower the point): no call to the uploader
        if self._ctx.retention_gate is not None:
            point = min(point, await self._ctx.retention_gate(self.topic.name, point))
        if point <= log_.first_offset:
            return
        history = self.history
        if history is not None and (history.end_offset or 0) < point:
            # What is cut must be readable from object storage, and ``first_offset`` must say so
            # at once (readers below it would skip): list the descriptors the uploader added.
            await history.refresh()
            described = history.end_offset or 0
            if described < point:
                log.warning(
                    "topic %s: the upload checkpoint allows cutting below %d but descriptors end at %d; "
                    "keeping what is not described",
                    self.topic.name,
                    point,
                    described,
                )
                point = described
                if point <= log_.first_offset:
                    return
        try:
            await log_.truncate_before(point)
        except StorageError as exc:
            log.warning("topic %s: retention could not delete segments: %s", self.topic.name, exc)

    # ------------------------------------------------------------------ compaction
    async def compact(self) -> CompactionInfo:
        """Compact the topic now, up to what is deliverable (:mod:`danube_broker.compaction`).
        Callers asking while one runs share it; a caller that stops waiting (an RPC past its
        deadline) does not stop it: it finishes and is stored (closing the topic stops it)."""
        self.topic.check_open()
        return await asyncio.shield(self._start_compaction())

    def _start_compaction(self) -> asyncio.Task[CompactionInfo]:
        """The compaction running now, else a new one (a task of its own)."""
        task = self._compacting
        if task is None or task.done():
            task = asyncio.create_task(self._compact(), name=f"compact-{self.topic.name}")
            task.add_done_callback(self._compaction_done)
            self._compacting = task
        return task

    def _compaction_done(self, task: asyncio.Task[CompactionInfo]) -> None:
        """Say how a compaction failed (its callers, if any, got the error too); one still due
        by the threshold is retried at the next retention sweep."""
        if task.cancelled():
            return  # the topic closed
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, FencedOut):
            log.info("%s: compaction left to the new owner", exc.message)
            self._compaction_queued = False
        elif isinstance(exc, DanubeError):
            log.warning("topic %s: compaction failed: %s", self.topic.name, exc)
        else:
            log.error("topic %s: compaction crashed", self.topic.name, exc_info=exc)

    async def _compact(self) -> CompactionInfo:
        uncompacted = self._uncompacted_bytes
        observer = self._ctx.wal_observer
        try:
            info = await self.compaction.compact(self.log, self._deliverable())
        except DanubeError:
            if observer is not None:
                observer.compacted(None)
            raise
        if observer is not None:
            observer.compacted(info.duration_s)
        self._uncompacted_bytes = max(0, self._uncompacted_bytes - uncompacted)  # published meanwhile stays
        self._compaction_queued = False
        self._notify_subscriptions()  # readers of the view below the new horizon
        return info

    def compaction_info(self) -> CompactionInfo | None:
        """The stored view's figures (None: never compacted, or the view could not be loaded)."""
        return self.compaction.info

    def set_compaction_threshold(self, threshold_bytes: int) -> None:
        """The ``compaction_threshold_bytes`` policy changed (0: compact only when asked)."""
        self.policies = replace(self.policies, compaction_threshold_bytes=max(0, threshold_bytes))
        self._compact_at = float(threshold_bytes or math.inf)
        if self._uncompacted_bytes >= self._compact_at:
            self._compaction_queued = True
        self.retention_changed()

    def _retention_cap(self) -> int | None:
        """With a compaction threshold, a message's last copy goes only once it is compacted:
        retention cuts below the horizon at most (None: no cap)."""
        if self.policies.compaction_threshold_bytes > 0:
            return self.compaction.horizon
        return None

    async def _write_compaction_record(self, value: dict[str, Any]) -> None:
        key = self._ctx.resources.keys.compaction(self.topic.topic_name)
        await self._store.put_fenced(key, value, "writing the compacted view's record")

    def _estimate_uncompacted(self) -> None:
        """After a restart the bytes published since the last compaction are not known: the
        local WAL's bytes above the horizon, pro rata by offsets."""
        if math.isinf(self._compact_at):
            return
        local = self.local
        first, end, horizon = local.first_offset, local.durable_offset, self.compaction.horizon
        if end <= max(first, horizon):
            return
        on_disk = local.stats().bytes_on_disk
        self._uncompacted_bytes = on_disk * (end - max(first, horizon)) // max(1, end - first)
        if self._uncompacted_bytes >= self._compact_at:
            self._compaction_queued = True

    # ------------------------------------------------------------------ stats
    def stint_stats(self) -> tuple[str, int, int, int] | None:
        if self.stint is None:
            return None
        reserved = self.reservation.reserved_to if self.reservation is not None else 0
        return self.stint.writer, self.stint.epoch, self.stint.start_offset, reserved

    def gap_stats(self) -> tuple[tuple[int, int, str, str, int, str], ...]:
        gaps = self.history.gaps if self.history is not None else []
        return tuple((g.start_offset, g.next_offset, g.reason, g.decided_by, g.at_ms, g.writer) for g in gaps)

    async def uploaded_range(self) -> tuple[int, int] | None:
        """Offsets ``[first, next)`` in object storage: ``next`` from the uploader's checkpoint,
        read now (the descriptors this broker listed may be older); ``first`` the oldest listed
        descriptor's, else the log's first offset. None without object storage or before the
        first upload of this incarnation."""
        if self._ctx.tiering is None:
            return None
        res = self._ctx.resources
        value = await res.store.get_json(res.keys.upload_checkpoint(self.topic.topic_name))
        end = checkpoint_of(value, self.stint.incarnation if self.stint is not None else None)
        if not end:
            return None
        listed = self.history.first_offset if self.history is not None else None
        first = listed if listed is not None else self.log.first_offset
        return min(first, end), end

    def wal_stats(self) -> tuple[int, int]:
        """(bytes on disk, segments)."""
        s = self.local.stats()
        return s.bytes_on_disk, s.segments

    def tiered_stats(self) -> TieredStats | None:
        """Object storage's figures for this topic (None: neither history nor cloud acks)."""
        if self.history is None and self.cloud is None:
            return None
        h = self.history.stats() if self.history is not None else None
        c = self.cloud
        return TieredStats(
            history_first_offset=h.first_offset if h else None,
            history_end_offset=h.end_offset if h else None,
            descriptors=h.descriptors if h else 0,
            remote_reads=h.reads if h else 0,
            remote_entries=h.entries if h else 0,
            remote_gets=h.gets if h else 0,
            remote_bytes_fetched=h.bytes_fetched if h else 0,
            remote_errors=h.errors if h else 0,
            last_remote_error=h.last_error if h else "",
            retention_deleted_segments=h.deleted_segments if h else 0,
            retention_deleted_bytes=h.deleted_bytes if h else 0,
            cloud_uploaded_next_offset=c.uploaded_next_offset if c else None,
            cloud_waiting=c.waiting if c else 0,
            cloud_flushes=c.flushes if c else 0,
            cloud_flush_failures=c.failures if c else 0,
            last_cloud_error=c.last_error if c else "",
        )


def _cloud_uploader(ctx: ReliableContext) -> Any:
    """The uploader ``cloud`` acks go through (None: "cloud" acts as "fsync")."""
    return ctx.tiering.uploader if ctx.tiering is not None else None
