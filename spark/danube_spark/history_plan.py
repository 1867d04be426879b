"""The driver's half of a history read: find the topic's objects, prune them, group them into
Spark tasks. Only the listing touches the network (etcd or the object store); the rest is pure.

Pruning, per topic partition:

- offsets: :func:`~danube_common.segment_objects.cover` keeps the objects holding offsets in
  ``[start_offset, end_offset)`` (and, when listed objects overlap, one object per offset);
- publish time: an object whose descriptor says its newest message is older than
  ``start_time`` is skipped (descriptors from etcd only: a listing does not know the times;
  the executors still filter every row by time).

Each task reads consecutive objects of one partition, at most ``max_objects_per_partition`` of
them and ``max_partition_bytes`` in all (an object larger than that is a task of its own).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.objstore import open_object_store
from danube_common.records import TopicRecord
from danube_common.segment_objects import HistoryObject, Piece, cover, load_descriptors, objects_from_listing
from danube_common.storage import parse_object_key_parts
from danube_common.topic_name import TopicName
from danube_spark.history_options import HistoryOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadTask:
    """What one Spark task reads: consecutive pieces of one topic partition."""

    #: The topic asked for (a partitioned topic's name, not its partition's).
    topic: str
    #: The partition number (None: a topic that is not partitioned).
    partition: int | None
    pieces: tuple[Piece, ...]

    @property
    def size_bytes(self) -> int:
        return sum(p.obj.size_bytes for p in self.pieces)


@dataclass(frozen=True, slots=True)
class HistoryPlan:
    tasks: list[ReadTask]
    #: Objects found for the topic (all partitions), and how many the plan reads.
    objects_found: int
    objects_read: int
    #: Per partition topic: offset ranges in the asked range that no object holds.
    holes: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def objects_pruned(self) -> int:
        return self.objects_found - self.objects_read


async def list_objects(opts: HistoryOptions) -> dict[TopicName, list[HistoryObject]]:
    """The topic's objects, per partition topic (the topic itself when it is not partitioned)."""
    if opts.etcd is not None:
        return await _from_etcd(opts)
    return await _from_listing(opts)


async def _from_etcd(opts: HistoryOptions) -> dict[TopicName, list[HistoryObject]]:
    assert opts.etcd is not None
    meta = EtcdStore.from_config(opts.etcd)
    keys = Keys(opts.etcd.cluster)
    try:
        kv = await meta.get(keys.topic(opts.topic))
        record = TopicRecord.from_kv(kv) if kv is not None else None
        parts = (
            [opts.topic.partition(i) for i in range(record.partitions)]
            if record is not None and record.partitions > 0
            else [opts.topic]
        )
        out: dict[TopicName, list[HistoryObject]] = {}
        for part in parts:
            descriptors = await load_descriptors(meta, keys, part)
            out[part] = [HistoryObject.from_descriptor(d) for d in descriptors]
        return out
    finally:
        await meta.aclose()


async def _from_listing(opts: HistoryOptions) -> dict[TopicName, list[HistoryObject]]:
    t = opts.topic
    async with await open_object_store(opts.object_store) as store:
        infos = [
            *await store.list(f"{t.namespace}/{t.local}/"),
            *await store.list(f"{t.namespace}/{t.local}-part-"),
        ]
    found: set[TopicName] = set()
    for info in infos:
        parts = parse_object_key_parts(info.key)
        if parts is not None and (
            parts.topic == t or (parts.topic.base == t and parts.topic.partition_index is not None)
        ):
            found.add(parts.topic)
    return {
        part: objects_from_listing(infos, part, incarnation=opts.incarnation)
        for part in sorted(found, key=_partition_order)
    }


def _partition_order(t: TopicName) -> tuple[int, str]:
    return (t.partition_index if t.partition_index is not None else -1, t.local)


def plan_reads(found: Mapping[TopicName, Sequence[HistoryObject]], opts: HistoryOptions) -> HistoryPlan:
    """Prune and group (pure)."""
    tasks: list[ReadTask] = []
    holes: dict[str, list[tuple[int, int]]] = {}
    total = read = 0
    for part, objects in found.items():
        total += len(objects)
        pieces, gaps = cover(objects, start_offset=opts.start_offset, end_offset=opts.end_offset)
        if opts.start_time_ms is not None:
            start_ms = opts.start_time_ms
            pieces = [
                p for p in pieces if not (p.obj.max_publish_time_ms and p.obj.max_publish_time_ms < start_ms)
            ]
        if gaps:
            holes[str(part)] = gaps
        read += len({p.obj.key for p in pieces})
        index = part.partition_index if part != opts.topic else None
        tasks += _group(str(opts.topic), index, pieces, opts)
    return HistoryPlan(tasks=tasks, objects_found=total, objects_read=read, holes=holes)


def _group(
    topic: str, partition: int | None, pieces: Sequence[Piece], opts: HistoryOptions
) -> list[ReadTask]:
    out: list[ReadTask] = []
    batch: list[Piece] = []
    size = 0
    for p in pieces:
        if batch and (
            len(batch) >= opts.max_objects_per_partition or size + p.obj.size_bytes > opts.max_partition_bytes
        ):
            out.append(ReadTask(topic, partition, tuple(batch)))
            batch, size = [], 0
        batch.append(p)
        size += p.obj.size_bytes
    if batch:
        out.append(ReadTask(topic, partition, tuple(batch)))
    return out


def plan_history(opts: HistoryOptions) -> HistoryPlan:
    """List and plan (blocking: runs its own event loop; call it where none runs)."""
    plan = plan_reads(asyncio.run(list_objects(opts)), opts)
    log.info(
        "danube-history %s: %d task(s), %d of %d object(s) read, %d pruned%s",
        opts.topic,
        len(plan.tasks),
        plan.objects_read,
        plan.objects_found,
        plan.objects_pruned,
        f"; offsets no object holds: {plan.holes}" if plan.holes else "",
    )
    return plan
