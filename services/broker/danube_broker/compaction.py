"""Topic compaction: a reliable topic's compacted view, computed and kept by its owner.

The **compacted view** of a reliable topic holds, for every routing key, the newest message of
that key below the view's **horizon** (an offset):

- a key whose newest message has an empty payload is left out (a *tombstone* deletes the key);
- messages without a routing key are left out;
- a chunked message (``StreamMessage.chunk``) is kept with all its chunks, once complete; the
  chunks of a key's message still incomplete at the horizon are kept too (its other chunks
  follow in the log, so a reader of the view receives the whole message);
- a pack (``batch_size`` >= 2: several messages of one producer sharing a key) is one message
  here, kept whole: its last message is the key's newest value.

Subscriptions and readers created with ``read_compacted`` read the view below the horizon and
the log from the horizon on (:class:`~danube_broker.dispatch.reliable.engine.SubscriptionEngine`);
offsets between the view's entries were compacted away and count as acknowledged. Others read
the log as always: compaction never changes the log itself.

Each compaction continues from the previous view: it replays the view's entries and then the
messages from the old horizon up to the log's durable end, which becomes the new horizon. The
view is stored whole, as WAL frames (``danube_common.wal.codec``) in one file in the topic's WAL
directory (``compacted-<horizon>.view``; the WAL and the uploader ignore it) and, with object
storage, as one object (``compacted/<ns>/<topic>/i<incarnation>/<horizon>-<unique>.view``), so a
new owner finds it. Then the topic's record in etcd (``Keys.compaction``) is written, fenced on
the owner's epoch, and the older view's file and object are deleted. A broker that opens the
topic loads the view the record names (local file, else object storage; the CRC32C of the bytes
must match). A view that cannot be found is reported and rebuilt by the next compaction from
what the log still holds.

With a ``compaction_threshold_bytes`` policy the owner compacts by itself once that many bytes
were published since the last compaction (checked by the broker's retention sweep), and
retention deletes a message's last copy only once it is below the horizon (with object storage:
the uploaded history; without it: the local WAL). Without the policy, compaction runs only when
asked (``danube-admin topics compact``) and retention is not held back by it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import google_crc32c

from danube_broker.dispatch.reliable.log_port import TopicLogPort
from danube_common.errors import DanubeError, DataLoss, StorageError
from danube_common.objstore import ObjectStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.storage import incarnation_prefix
from danube_common.topic_name import TopicName
from danube_common.wal.codec import StopReason, encode_frame, scan

log = logging.getLogger(__name__)

#: Entries (and bytes) read from the log per step of a compaction.
READ_ENTRIES = 4096
READ_BYTES = 4 * 1024 * 1024
#: Where views live in object storage.
OBJECT_PREFIX = "compacted/"
#: The view file's name in the topic's WAL directory.
FILE_SUFFIX = ".view"


class ViewEntry(NamedTuple):
    """One message of the view: a log entry (``log_port.Entry``)."""

    offset: int
    publish_time_ms: int
    record: bytes


class CompactedView:
    """The newest message of each key below ``horizon``, in offset order. Immutable once built."""

    __slots__ = ("_offsets", "bytes", "entries", "horizon", "keys")

    def __init__(self, horizon: int, entries: Sequence[ViewEntry], keys: int) -> None:
        self.horizon = horizon
        self.entries = list(entries)
        self._offsets = [e.offset for e in self.entries]
        self.keys = keys
        self.bytes = sum(len(e.record) for e in self.entries)

    def read(self, from_offset: int, max_entries: int) -> list[ViewEntry]:
        """Entries at or above ``from_offset`` (below the horizon), at most ``max_entries``."""
        i = bisect_left(self._offsets, from_offset)
        return self.entries[i : i + max(0, max_entries)]

    @property
    def first_offset(self) -> int:
        """The oldest entry's offset (the horizon when the view is empty)."""
        return self._offsets[0] if self._offsets else self.horizon


class _Chunks(NamedTuple):
    uuid: str
    total: int
    entries: list[ViewEntry]


class Compactor:
    """Builds a view: ``add`` every message in offset order, then ``finish``. Pure."""

    def __init__(self, base: CompactedView | None = None) -> None:
        #: Key -> the entries of its newest complete message (one, or a chunked message's all).
        self._latest: dict[str, list[ViewEntry]] = {}
        #: Key -> a chunked message of it still incomplete (newer than ``_latest[key]``).
        self._partial: dict[str, _Chunks] = {}
        self.read = 0
        self._last = -1
        if base is not None:
            for e in base.entries:
                self.add(e.offset, e.publish_time_ms, e.record)
            self.read = 0

    def add(self, offset: int, publish_time_ms: int, record: bytes) -> None:
        if offset <= self._last:
            raise ValueError(f"compaction reads offsets in order: {offset} after {self._last}")
        self._last = offset
        self.read += 1
        msg = pb.StreamMessage.FromString(record)
        if not msg.HasField("routing_key") or not msg.routing_key:
            return  # no key: not in the view
        key = msg.routing_key
        entry = ViewEntry(offset, publish_time_ms, record)
        if msg.HasField("chunk"):
            self._chunk(key, msg.chunk, entry)
            return
        # A message of the key after an incomplete chunked one: that one was abandoned.
        self._partial.pop(key, None)
        if not msg.payload and msg.batch_size < 2:
            self._latest.pop(key, None)  # a tombstone
        else:
            self._latest[key] = [entry]

    def _chunk(self, key: str, chunk: pb.MessageChunk, entry: ViewEntry) -> None:
        if chunk.index == 0:
            group = _Chunks(chunk.message_uuid, max(1, chunk.count), [entry])
        else:
            group_or_none = self._partial.get(key)
            if (
                group_or_none is None
                or group_or_none.uuid != chunk.message_uuid
                or len(group_or_none.entries) != chunk.index
            ):
                return  # not the continuation of the key's message in progress: a broken message
            group = group_or_none
            group.entries.append(entry)
        if len(group.entries) >= group.total:
            self._partial.pop(key, None)
            self._latest[key] = group.entries
        else:
            self._partial[key] = group

    def finish(self, horizon: int) -> CompactedView:
        if horizon <= self._last:
            raise ValueError(f"horizon {horizon} is not above the last offset read ({self._last})")
        entries = [e for es in self._latest.values() for e in es]
        entries += [e for g in self._partial.values() for e in g.entries]
        entries.sort()
        return CompactedView(horizon, entries, keys=len(self._latest))


# ---------------------------------------------------------------------------------------- storage


def encode_view(view: CompactedView) -> bytes:
    return b"".join(encode_frame(e.offset, e.publish_time_ms, e.record) for e in view.entries)


def decode_view(data: bytes, *, horizon: int, entries: int, keys: int) -> CompactedView:
    """A stored view back (DataLoss if the bytes are not ``entries`` good frames below ``horizon``)."""
    out: list[ViewEntry] = []
    pos = 0
    while pos < len(data):
        res = scan(data, pos, max_frames=1)
        if not res.frames or res.stop.is_damage or res.stop is StopReason.TRUNCATED:
            raise DataLoss(f"compacted view damaged at byte {pos}: {res.detail or res.stop.value}")
        f = res.frames[0]
        if (out and f.offset <= out[-1].offset) or f.offset >= horizon:
            raise DataLoss(f"compacted view damaged: offset {f.offset} out of order (horizon {horizon})")
        out.append(ViewEntry(f.offset, f.publish_time_ms, f.record))
        pos = res.end
    if len(out) != entries:
        raise DataLoss(f"compacted view holds {len(out)} entries, its record says {entries}")
    return CompactedView(horizon, out, keys)


def crc32c(data: bytes) -> int:
    return int(google_crc32c.value(data))


def view_object_key(topic: TopicName, incarnation: int | None, horizon: int, unique: str) -> str:
    """``unique`` (a new one per write) keeps two brokers computing a view at the same horizon
    (a paused former owner and the new one) from overwriting each other's object: only the one
    whose fenced record write lands is ever named."""
    where = incarnation_prefix(topic, incarnation) if incarnation else f"{topic.namespace}/{topic.local}/"
    return f"{OBJECT_PREFIX}{where}{horizon:020d}-{unique}{FILE_SUFFIX}"


def view_horizon(name: str) -> int | None:
    """The horizon in a view's file name or object key (None: not a view's)."""
    base = name.rpartition("/")[2]
    if not base.endswith(FILE_SUFFIX):
        return None
    digits = base.removeprefix("compacted-")[:20]
    return int(digits) if len(digits) == 20 and digits.isdigit() else None


def view_file_name(horizon: int) -> str:
    return f"compacted-{horizon:020d}{FILE_SUFFIX}"


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    """A stored view's figures (``danube-admin topics compact``, topic stats)."""

    horizon: int
    entries: int
    keys: int
    bytes: int
    compacted_at_ms: int
    duration_s: float
    messages_read: int
    stored_in: str
    crc32c: int = 0
    object_key: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "horizon": self.horizon,
            "entries": self.entries,
            "keys": self.keys,
            "bytes": self.bytes,
            "compacted_at_ms": self.compacted_at_ms,
            "duration_s": self.duration_s,
            "messages_read": self.messages_read,
            "stored_in": self.stored_in,
            "crc32c": self.crc32c,
            "object": self.object_key,
        }

    @classmethod
    def from_json(cls, value: Any) -> CompactionInfo:
        if not isinstance(value, dict):
            raise ValueError(f"not a compaction record: {value!r}")
        return cls(
            horizon=int(value["horizon"]),
            entries=int(value["entries"]),
            keys=int(value.get("keys", 0)),
            bytes=int(value.get("bytes", 0)),
            compacted_at_ms=int(value.get("compacted_at_ms", 0)),
            duration_s=float(value.get("duration_s", 0.0)),
            messages_read=int(value.get("messages_read", 0)),
            stored_in=str(value.get("stored_in", "")),
            crc32c=int(value.get("crc32c", 0)),
            object_key=str(value.get("object", "")),
        )

    def to_proto(self, name: str) -> apb.CompactionInfo:
        return apb.CompactionInfo(
            name=name,
            horizon=self.horizon,
            entries=self.entries,
            keys=self.keys,
            bytes=self.bytes,
            compacted_at_ms=self.compacted_at_ms,
            duration_s=self.duration_s,
            messages_read=self.messages_read,
            stored_in=self.stored_in,
        )


#: Writes the topic's compaction record in etcd, fenced on the owner's epoch (FencedOut).
RecordWriter = Callable[[dict[str, Any]], Any]


class TopicCompaction:
    """One reliable topic's view on its owner: loading, computing, storing (one at a time)."""

    def __init__(
        self,
        topic: TopicName,
        *,
        directory: Path,
        objects: ObjectStore | None,
        incarnation: int | None,
        write_record: RecordWriter,
    ) -> None:
        self.topic = topic
        self._dir = directory
        self._objects = objects
        self._incarnation = incarnation
        self._write_record = write_record
        #: The view readers with ``read_compacted`` read (None: none, or not found).
        self.view: CompactedView | None = None
        self.info: CompactionInfo | None = None
        #: Why the recorded view could not be loaded ("" when it was, or there is none).
        self.load_error = ""
        self._lock = asyncio.Lock()

    @property
    def horizon(self) -> int:
        return self.view.horizon if self.view is not None else 0

    # ------------------------------------------------------------------ open
    async def load(self, record: Any) -> None:
        """Load the view the etcd ``record`` names (None: never compacted)."""
        if record is None:
            return
        try:
            info = CompactionInfo.from_json(record)
        except (ValueError, KeyError, TypeError) as exc:
            self.load_error = f"malformed compaction record ({exc})"
            log.error("topic %s: %s; the next compaction starts over", self.topic, self.load_error)
            return
        data = await asyncio.to_thread(self._read_file, info.horizon)
        where = "local disk"
        if (data is None or crc32c(data) != info.crc32c) and self._objects is not None and info.object_key:
            try:
                data = await self._objects.get(info.object_key)
                where = "object storage"
            except DanubeError as exc:
                self.load_error = f"view object {info.object_key} unreadable ({exc})"
                data = None
        if data is None or crc32c(data) != info.crc32c:
            self.load_error = self.load_error or (
                f"view at horizon {info.horizon} not found (no local file"
                + (", no object storage)" if self._objects is None else ")")
            )
            log.error(
                "topic %s: compacted view unavailable: %s; readers with read_compacted read the log until the "
                "next compaction rebuilds it (danube-admin topics compact)",
                self.topic,
                self.load_error,
            )
            return
        try:
            self.view = decode_view(data, horizon=info.horizon, entries=info.entries, keys=info.keys)
        except DataLoss as exc:
            self.load_error = exc.message
            log.error("topic %s: %s", self.topic, exc.message)
            return
        self.info = info
        log.info(
            "topic %s: compacted view loaded from %s: %d key(s) below offset %d",
            self.topic,
            where,
            info.keys,
            info.horizon,
        )

    def _read_file(self, horizon: int) -> bytes | None:
        try:
            return (self._dir / view_file_name(horizon)).read_bytes()
        except OSError:
            return None

    # ------------------------------------------------------------------ compaction
    async def compact(self, log_: TopicLogPort, end: int) -> CompactionInfo:
        """Compact the log below ``end`` (durable, deliverable) into a new view and store it."""
        async with self._lock:
            return await self._compact(log_, end)

    async def _compact(self, log_: TopicLogPort, end: int) -> CompactionInfo:
        base = self.view
        start = base.horizon if base is not None else 0
        if end <= start and self.info is not None:
            return self.info  # nothing new since the last compaction
        t0 = time.monotonic()
        comp = Compactor(base)
        pos = start
        while pos < end:
            entries = await log_.read_async(pos, READ_ENTRIES, READ_BYTES)
            if not entries:
                break
            for e in entries:
                if e.offset >= end:
                    break
                comp.add(e.offset, e.publish_time_ms, e.record)
            pos = entries[-1].offset + 1
            await asyncio.sleep(0)  # a large backlog: let the topic's traffic through
        view = comp.finish(max(end, start))
        data = encode_view(view)
        info = CompactionInfo(
            horizon=view.horizon,
            entries=len(view.entries),
            keys=view.keys,
            bytes=view.bytes,
            compacted_at_ms=int(time.time() * 1000),
            duration_s=0.0,
            messages_read=comp.read,
            stored_in="object storage" if self._objects is not None else "local disk",
            crc32c=crc32c(data),
            object_key=view_object_key(self.topic, self._incarnation, view.horizon, uuid.uuid4().hex[:12])
            if self._objects is not None
            else "",
        )
        await asyncio.to_thread(self._write_file, view.horizon, data)
        if self._objects is not None:
            await self._objects.put(info.object_key, data)
        info = replace(info, duration_s=round(time.monotonic() - t0, 6))
        await self._write_record(info.to_json())
        self.view, self.info, self.load_error = view, info, ""
        log.info(
            "topic %s compacted: %d key(s), %d entries, %d bytes below offset %d (%d message(s) read in %.3f s)",
            self.topic,
            info.keys,
            info.entries,
            info.bytes,
            info.horizon,
            info.messages_read,
            info.duration_s,
        )
        await self._delete_older(info)
        return info

    def _write_file(self, horizon: int, data: bytes) -> None:
        """The view file, whole or not at all (a temporary file renamed; removed at the WAL's
        next recovery if a crash leaves it)."""
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            path = self._dir / view_file_name(horizon)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(
                f"cannot write the compacted view of {self.topic} in {self._dir}: {exc}"
            ) from exc

    async def _delete_older(self, keep: CompactionInfo) -> None:
        """Every older view of the topic, file and object: the one this replaced, and any a
        crash left before its record was written (never a newer one: a broker that lost the
        topic meanwhile may be finishing a compaction while the new owner stores its own).
        Failures are logged: they are only space."""

        def older(name: str) -> bool:
            horizon = view_horizon(name)
            return horizon is not None and horizon < keep.horizon

        def files() -> None:
            for path in self._dir.glob(f"compacted-*{FILE_SUFFIX}"):
                if older(path.name):
                    path.unlink(missing_ok=True)

        try:
            await asyncio.to_thread(files)
        except OSError as exc:
            log.warning("topic %s: removing old compacted view files failed: %s", self.topic, exc)
        if self._objects is None or not keep.object_key:
            return
        prefix = keep.object_key.rpartition("/")[0] + "/"
        try:
            for obj in await self._objects.list(prefix):
                if older(obj.key):
                    await self._objects.delete(obj.key)
        except DanubeError as exc:
            log.warning("topic %s: deleting old view objects under %s failed: %s", self.topic, prefix, exc)
