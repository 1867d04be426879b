"""A reliable topic's history read back from object storage.

The WAL uploader copies a topic's segments to object storage and describes each copy in etcd
(``danube_common.storage``: ``[start_offset, next_offset)``, object key, size). Offsets below
the local log's ``first_offset`` (trimmed by retention, or written by an earlier owner of the
topic) are read from there:

1. **find** the descriptor holding the offset (the topic's descriptors are listed at open and
   listed again when a read finds none: the uploader adds descriptors all the time);
2. **fetch** the object's bytes in ``chunk_bytes`` pieces with ranged GETs, through one
   bounded LRU of chunks shared by every topic of the broker (:class:`ChunkCache`; readers
   missing the same chunk at once share one GET);
3. **decode** frames with the WAL codec: the object's header must name the descriptor's start,
   every frame's crc32c must match and offsets must be consecutive; anything else raises
   ``CorruptData`` naming the object and offset, never a silent skip;
4. remember where the read stopped (offset -> byte position), so a sequential replay continues
   there instead of scanning the object from its start again.

An offset no descriptor holds is a :class:`~danube_broker.wal.errors.HistoryGap`.

Retention may delete the oldest objects (``ReliableTopic``'s archive retention: descriptors
first, then objects): :meth:`RemoteHistory.cut_below` drops them from the list at once, and a
read that finds its object gone lists the descriptors again, so the next read starts at the new
first offset.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from danube_broker.wal.errors import HistoryGap
from danube_broker.wal.model import LogEntry
from danube_common.errors import CorruptData
from danube_common.keys import Keys
from danube_common.log_state import AcceptedGap, LogRecords
from danube_common.metadata.store import MetadataStore
from danube_common.objstore import InvalidObjectRange, ObjectNotFound, ObjectStore
from danube_common.segment_objects import load_descriptors
from danube_common.storage import SegmentDescriptor, find
from danube_common.topic_name import TopicName
from danube_common.wal.codec import FRAME_HEADER_BYTES, scan
from danube_common.wal.segment import HEADER_BYTES, decode_header

log = logging.getLogger(__name__)

ChunkKey = tuple[str, int]  # (object key, chunk index)

#: Byte positions remembered per object, and objects remembered.
_POSITIONS_PER_OBJECT = 256
_POSITIONS_OBJECTS = 4096


class ChunkCache:
    """A bounded LRU of object chunks (``max_bytes`` of chunk data in all; 0 keeps none).

    Objects are immutable (deterministic keys, same bytes on re-upload), so a cached chunk never
    goes stale. Concurrent misses of one chunk share one fetch.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._inflight: dict[ChunkKey, asyncio.Future[bytes]] = {}
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    async def get(self, key: ChunkKey, fetch: Callable[[], Awaitable[bytes]]) -> bytes:
        while True:
            data = self._lru.get(key)
            if data is not None:
                self._lru.move_to_end(key)
                self.hits += 1
                return data
            shared = self._inflight.get(key)
            if shared is None:
                break
            try:
                data = await asyncio.shield(shared)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if shared.cancelled() and (task is None or not task.cancelling()):
                    continue  # the fetching reader was cancelled, not us: fetch it ourselves
                raise
            self.hits += 1
            return data
        self.misses += 1
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)
        self._inflight[key] = fut
        try:
            data = await fetch()
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        finally:
            del self._inflight[key]
        fut.set_result(data)
        self._put(key, data)
        return data

    def _put(self, key: ChunkKey, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        self._lru[key] = data
        self.bytes += len(data)
        while self.bytes > self.max_bytes:
            _, old = self._lru.popitem(last=False)
            self.bytes -= len(old)
            self.evictions += 1


def _retrieve(fut: asyncio.Future[bytes]) -> None:
    """Mark a shared fetch's exception as seen (its fetcher raised it already)."""
    if not fut.cancelled():
        fut.exception()


class Positions:
    """Byte positions of frames in objects, learnt while reading: ``(offset -> position)``."""

    def __init__(self, *, per_object: int = _POSITIONS_PER_OBJECT, objects: int = _POSITIONS_OBJECTS) -> None:
        self._per_object = per_object
        self._objects = objects
        self._known: OrderedDict[str, tuple[list[int], list[int]]] = OrderedDict()

    def nearest(self, key: str, offset: int) -> tuple[int, int] | None:
        """The known ``(offset, position)`` with the largest offset not above ``offset``."""
        known = self._known.get(key)
        if known is None:
            return None
        self._known.move_to_end(key)
        offsets, positions = known
        i = bisect.bisect_right(offsets, offset) - 1
        return (offsets[i], positions[i]) if i >= 0 else None

    def learn(self, key: str, offset: int, position: int) -> None:
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = ([], [])
            while len(self._known) > self._objects:
                self._known.popitem(last=False)
        self._known.move_to_end(key)
        offsets, positions = known
        i = bisect.bisect_left(offsets, offset)
        if i < len(offsets) and offsets[i] == offset:
            return
        offsets.insert(i, offset)
        positions.insert(i, position)
        if len(offsets) > self._per_object:
            del offsets[1::2], positions[1::2]  # thin out, keeping the first


@dataclass(frozen=True, slots=True)
class RemoteReadStats:
    descriptors: int
    first_offset: int | None
    end_offset: int | None
    #: read() calls that returned entries, the entries, and the GETs and bytes they fetched.
    reads: int
    entries: int
    gets: int
    bytes_fetched: int
    #: Reads that failed (gap, damage, store errors) and the last one's message.
    errors: int
    last_error: str
    #: Segments (and their bytes) retention deleted from object storage on this broker.
    deleted_segments: int = 0
    deleted_bytes: int = 0


class RemoteHistory:
    """One topic's history in object storage. Use ``await RemoteHistory.open(...)``."""

    def __init__(
        self,
        topic: TopicName,
        *,
        objects: ObjectStore,
        meta: MetadataStore,
        keys: Keys,
        cache: ChunkCache,
        chunk_bytes: int,
        positions: Positions | None = None,
    ) -> None:
        if chunk_bytes < FRAME_HEADER_BYTES:
            raise ValueError(f"chunk_bytes must be at least {FRAME_HEADER_BYTES}, got {chunk_bytes}")
        self.topic = topic
        self._objects = objects
        self._meta = meta
        self._keys = keys
        self._cache = cache
        self._chunk = chunk_bytes
        self._positions = positions or Positions()
        self.descriptors: list[SegmentDescriptor] = []
        #: Offsets declared lost by a recorded decision (an unclean takeover): skipped by reads.
        self.gaps: list[AcceptedGap] = []
        self._loads = 0
        self._load_lock = asyncio.Lock()
        self.reads = 0
        self.entries = 0
        self.gets = 0
        self.bytes_fetched = 0
        self.errors = 0
        self.last_error = ""
        #: Offsets below this were deleted by retention (a listing older than the deletion
        #: must not bring their descriptors back).
        self._cut_below = 0
        #: What retention deleted from object storage: segments and bytes.
        self.deleted_segments = 0
        self.deleted_bytes = 0

    @classmethod
    async def open(
        cls,
        topic: TopicName,
        *,
        objects: ObjectStore,
        meta: MetadataStore,
        keys: Keys,
        cache: ChunkCache,
        chunk_bytes: int,
        positions: Positions | None = None,
    ) -> RemoteHistory:
        h = cls(
            topic,
            objects=objects,
            meta=meta,
            keys=keys,
            cache=cache,
            chunk_bytes=chunk_bytes,
            positions=positions,
        )
        await h.refresh()
        return h

    # ------------------------------------------------------------------ descriptors
    @property
    def first_offset(self) -> int | None:
        """The oldest offset in object storage (None: nothing uploaded yet)."""
        return self.descriptors[0].start_offset if self.descriptors else None

    @property
    def end_offset(self) -> int | None:
        """One past the newest offset in object storage (None: nothing uploaded yet)."""
        return self.descriptors[-1].next_offset if self.descriptors else None

    def find(self, offset: int) -> SegmentDescriptor | None:
        return find(self.descriptors, offset)

    def past_gaps(self, offset: int) -> int:
        """``offset``, or the end of the accepted gap(s) holding it."""
        at = offset
        for g in self.gaps:
            if g.covers(at):
                at = g.next_offset
        return at

    @property
    def lost_offsets(self) -> int:
        """How many offsets the accepted gaps gave up."""
        return sum(g.size for g in self.gaps)

    async def refresh(self) -> None:
        """List the topic's descriptors again (concurrent callers share one listing)."""
        seen = self._loads
        async with self._load_lock:
            if self._loads != seen:
                return
            self.gaps = await LogRecords(self._meta, self._keys).gaps(self.topic)
            listed = await load_descriptors(self._meta, self._keys, self.topic)
            cut = self._cut_below
            self.descriptors = [d for d in listed if d.next_offset > cut] if cut else listed
            self._loads += 1

    def cut_below(self, point: int, deleted: list[SegmentDescriptor]) -> None:
        """Retention deleted ``deleted`` (every descriptor below ``point``) from etcd: reads
        start at ``point`` from now on."""
        self._cut_below = max(self._cut_below, point)
        self.descriptors = [d for d in self.descriptors if d.next_offset > self._cut_below]
        self.deleted_segments += len(deleted)
        self.deleted_bytes += sum(d.size_bytes for d in deleted)

    # ------------------------------------------------------------------ reads
    async def read(
        self, from_offset: int, max_entries: int, max_bytes: int, *, local_first: int | None = None
    ) -> list[LogEntry]:
        """Entries from ``from_offset``, all from the one object holding it: at most
        ``max_entries`` and ``max_bytes`` of records (at least one). HistoryGap when no
        descriptor holds ``from_offset`` (``local_first``, for the message: where the local log
        starts); CorruptData for a damaged object; the store's errors as they are."""
        try:
            d = self.find(from_offset)
            if d is None:
                await self.refresh()
                d = self.find(from_offset)
            if d is None:
                raise HistoryGap(self._gap_message(from_offset, local_first))
            try:
                entries = await self._read_object(d, from_offset, max(1, max_entries), max_bytes)
            except ObjectNotFound:
                # Deleted by retention (on this broker or, after a move, on the previous owner):
                # listed again, the next read starts past it.
                await self.refresh()
                raise
        except Exception as exc:
            self.errors += 1
            self.last_error = str(exc)
            raise
        self.reads += 1
        self.entries += len(entries)
        return entries

    def _gap_message(self, offset: int, local_first: int | None) -> str:
        covered = (
            f"object storage holds offsets {self.first_offset}..{(self.end_offset or 0) - 1} "
            f"in {len(self.descriptors)} segment(s)"
            if self.descriptors
            else "object storage holds nothing of it"
        )
        local = f", the local log starts at {local_first}" if local_first is not None else ""
        return (
            f"topic {self.topic}: offset {offset} is in no segment descriptor ({covered}{local}): a gap in "
            "the topic's history. Check the WAL uploader (it may be behind, or the data was lost); a "
            "subscription can seek past it"
        )

    async def _read_object(
        self, d: SegmentDescriptor, from_offset: int, max_entries: int, max_bytes: int
    ) -> list[LogEntry]:
        key = d.object_key
        known = self._positions.nearest(key, from_offset)
        if known is not None and known[0] >= d.start_offset:
            at, pos = known
        else:
            head = await self._bytes_from(d, 0, HEADER_BYTES)
            header = decode_header(head[:HEADER_BYTES], source=f"object {key} of topic {self.topic}")
            if header.first_offset != d.start_offset:
                raise CorruptData(
                    f"object {key} of topic {self.topic} starts at offset {header.first_offset}, "
                    f"its descriptor says {d.start_offset}"
                )
            at, pos = d.start_offset, HEADER_BYTES
        out: list[LogEntry] = []
        got = 0
        buf = b""  # the object's bytes from ``pos`` (a frame boundary) on
        while True:
            more = await self._bytes_from(d, pos + len(buf)) if pos + len(buf) < d.size_bytes else b""
            if not more:
                raise CorruptData(
                    f"object {key} of topic {self.topic} ends at byte {pos + len(buf)} after offset {at - 1}, "
                    f"but its descriptor says it holds offsets up to {d.next_offset - 1}"
                )
            buf += more
            skip = max(0, from_offset - at)
            res = scan(
                buf,
                expected_offset=at,
                max_frames=min(skip + max_entries - len(out), d.next_offset - at),
                base_position=pos,
            )
            new_pos = pos
            done = False
            for f in res.frames:
                new_pos = f.position + FRAME_HEADER_BYTES + len(f.record)
                at = f.offset + 1
                if f.offset >= from_offset:
                    out.append(LogEntry(f.offset, f.publish_time_ms, f.record))
                    got += len(f.record)
                if at >= d.next_offset or len(out) >= max_entries or (out and got >= max_bytes):
                    done = True
                    break
            buf = buf[new_pos - pos :]
            pos = new_pos
            if done:
                break
            if res.stop.is_damage:
                if out:
                    break  # hand out the good entries; the next read, starting at the damage, raises
                raise CorruptData(
                    f"object {key} of topic {self.topic} is damaged at byte {res.end} (offset {at}): "
                    f"{res.detail}; it is not skipped: repair or re-upload the object, or seek past it"
                )
        if at < d.next_offset:
            self._positions.learn(key, at, pos)
        return out

    async def _bytes_from(self, d: SegmentDescriptor, position: int, length: int | None = None) -> bytes:
        """The object's bytes from ``position`` to the end of that chunk (at least ``length``
        bytes when given and the object has them)."""
        out = b""
        while True:
            index = position // self._chunk
            chunk = await self._chunk_at(d, index)
            part = chunk[position - index * self._chunk :]
            out += part
            position += len(part)
            if length is None or len(out) >= length or not part or position >= d.size_bytes:
                return out

    async def _chunk_at(self, d: SegmentDescriptor, index: int) -> bytes:
        start = index * self._chunk
        end = min(start + self._chunk, d.size_bytes)

        async def fetch() -> bytes:
            try:
                data = await self._objects.get(d.object_key, start=start, end=end)
            except InvalidObjectRange as exc:
                raise CorruptData(
                    f"object {d.object_key} of topic {self.topic} is shorter than its descriptor says "
                    f"({d.size_bytes} bytes): {exc.message}"
                ) from exc
            self.gets += 1
            self.bytes_fetched += len(data)
            return data

        return await self._cache.get((d.object_key, index), fetch)

    async def offset_for_time(self, publish_time_ms: int, *, before: int) -> int | None:
        """The first offset below ``before`` published at or after ``publish_time_ms`` (None:
        none). Reads only objects whose descriptor's max publish time is that recent (0 =
        unknown: read)."""
        for d in list(self.descriptors):
            if d.start_offset >= before:
                break
            if d.max_publish_time_ms and d.max_publish_time_ms < publish_time_ms:
                continue
            at = d.start_offset
            end = min(d.next_offset, before)
            while at < end:
                entries = await self.read(at, min(1024, end - at), 4 << 20)
                for e in entries:
                    if e.offset >= end:
                        break
                    if e.publish_time_ms >= publish_time_ms:
                        return e.offset
                at = entries[-1].offset + 1
        return None

    def stats(self) -> RemoteReadStats:
        return RemoteReadStats(
            descriptors=len(self.descriptors),
            first_offset=self.first_offset,
            end_offset=self.end_offset,
            reads=self.reads,
            entries=self.entries,
            gets=self.gets,
            bytes_fetched=self.bytes_fetched,
            errors=self.errors,
            last_error=self.last_error,
            deleted_segments=self.deleted_segments,
            deleted_bytes=self.deleted_bytes,
        )
