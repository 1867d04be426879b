"""Reliable topics' history in object storage, written the way the WAL uploader writes it.

- :func:`segment_object` builds an object's bytes (a WAL segment: header, then frames);
- :func:`put_history` uploads records as one object with its descriptor (and advances the
  upload checkpoint), in the uploader's crash-safe order: PUT -> descriptor if absent ->
  checkpoint;
- :class:`FakeUploader` is an in-process ``danube.uploader.v1.WalUploader``: ``Flush`` reads the
  broker's WAL segment files (it shares the broker's data directory, as the real sidecar does),
  uploads from the checkpoint on, one object per local segment piece: sealed segments whole,
  the open one up to ``up_to_offset`` (with 0, sealed segments only), records the descriptors
  and advances the checkpoint. A range that starts after the checkpoint on this disk (a gap
  before it) is FAILED_PRECONDITION. Faults: ``fail_with`` makes Flush raise, ``hold`` makes it
  wait; object store errors (e.g. through a FaultyProxy) surface as they are.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import google_crc32c
import grpc.aio

from danube_common.errors import DanubeError, FailedPrecondition, Unavailable
from danube_common.grpc_util import bind, new_server
from danube_common.keys import Keys
from danube_common.metadata.store import MetadataStore
from danube_common.objstore import ObjectStore
from danube_common.pb import DanubeWalUploader_pb2 as up
from danube_common.pb import DanubeWalUploader_pb2_grpc as up_grpc
from danube_common.storage import SegmentDescriptor, object_key
from danube_common.topic_name import TopicName
from danube_common.wal.codec import Frame, encode_frames
from danube_common.wal.segment import encode_header, parse_name, scan_segment_file


def segment_object(
    start: int, records: Sequence[bytes], publish_times_ms: Sequence[int] | None = None
) -> bytes:
    """A WAL segment holding ``records`` at offsets ``start..``: what an object holds."""
    pts = list(publish_times_ms) if publish_times_ms is not None else [1_000 + i for i in range(len(records))]
    return encode_header(start, int(time.time() * 1000)) + encode_frames(start, list(records), pts)


async def put_object_and_descriptor(
    objects: ObjectStore,
    meta: MetadataStore,
    keys: Keys,
    topic: TopicName,
    start: int,
    data: bytes,
    *,
    next_offset: int,
    max_publish_time_ms: int = 0,
    broker_id: str = "test",
    sealed: bool = True,
    advance_checkpoint: bool = True,
) -> SegmentDescriptor:
    key = object_key(topic, start, next_offset)
    await objects.put(key, data)
    desc = SegmentDescriptor(
        topic=str(topic),
        start_offset=start,
        next_offset=next_offset,
        object_key=key,
        size_bytes=len(data),
        crc32c=google_crc32c.value(data),
        max_publish_time_ms=max_publish_time_ms,
        uploaded_at_ms=int(time.time() * 1000),
        broker_id=broker_id,
        sealed=sealed,
    )
    dkey = keys.segment(topic, start)
    if not await meta.create(dkey, desc.to_json()):
        existing = SegmentDescriptor.from_json(await meta.get_json(dkey))
        if existing.next_offset != next_offset:
            raise AssertionError(f"a descriptor at {start} already holds [{start}, {existing.next_offset})")
    if advance_checkpoint:
        ckpt = await meta.get_json(keys.upload_checkpoint(topic))
        if ckpt is None or int(ckpt["next_offset"]) < next_offset:
            await meta.put(keys.upload_checkpoint(topic), {"next_offset": next_offset})
    return desc


async def put_history(
    objects: ObjectStore,
    meta: MetadataStore,
    keys: Keys,
    topic: TopicName,
    start: int,
    records: Sequence[bytes],
    *,
    publish_times_ms: Sequence[int] | None = None,
    advance_checkpoint: bool = True,
) -> SegmentDescriptor:
    """Upload ``records`` (offsets ``start..``) as one object with its descriptor."""
    pts = list(publish_times_ms) if publish_times_ms is not None else [1_000 + i for i in range(len(records))]
    data = segment_object(start, records, pts)
    return await put_object_and_descriptor(
        objects,
        meta,
        keys,
        topic,
        start,
        data,
        next_offset=start + len(records),
        max_publish_time_ms=max(pts, default=0),
        advance_checkpoint=advance_checkpoint,
    )


def local_frames(directory: Path, start: int, open_end: int | None) -> tuple[int | None, list[list[Frame]]]:
    """The frames at or after ``start`` in a topic's WAL directory, one list per segment: sealed
    segments whole, the open (last) one below ``open_end`` (None: not at all). Also the first
    offset on disk (None: no segment). Blocking."""
    out: list[list[Frame]] = []
    if not directory.exists():
        return None, out
    segments = sorted(
        (parsed[0], p) for p in directory.iterdir() if (parsed := parse_name(p.name)) and parsed[1] == "wal"
    )
    for i, (_, path) in enumerate(segments):
        last = i == len(segments) - 1
        if last and open_end is None:
            break
        frames = [
            f
            for f in scan_segment_file(path).result.frames
            if f.offset >= start and (not last or open_end is None or f.offset < open_end)
        ]
        if frames:
            out.append(frames)
    return (segments[0][0] if segments else None), out


class FakeUploader(up_grpc.WalUploaderServicer):
    """A faithful stand-in for the broker's WAL uploader sidecar (see the module docstring)."""

    def __init__(
        self, data_dir: Path, objects: ObjectStore, meta: MetadataStore, keys: Keys, *, broker_id: str = "b"
    ) -> None:
        self.data_dir = Path(data_dir)
        self.objects = objects
        self.meta = meta
        self.keys = keys
        self.broker_id = broker_id
        self.fail_with: DanubeError | None = None
        #: When set, Flush waits until it is set (cleared: hold every Flush).
        self.hold = asyncio.Event()
        self.hold.set()
        #: (topic, up_to_offset) of every Flush, and when each upload was recorded.
        self.calls: list[tuple[str, int]] = []
        self.uploaded_at: dict[int, float] = {}  # next_offset -> monotonic time of the checkpoint
        self._locks: dict[str, asyncio.Lock] = {}

    async def checkpoint(self, topic: TopicName) -> int:
        value: Any = await self.meta.get_json(self.keys.upload_checkpoint(topic))
        return int(value["next_offset"]) if value else 0

    async def upload(self, topic: TopicName, up_to_offset: int = 0) -> int:
        """Upload from the checkpoint on: sealed segments, and the open one up to
        ``up_to_offset`` (0: sealed segments only). Returns the checkpoint after it."""
        lock = self._locks.setdefault(str(topic), asyncio.Lock())
        async with lock:
            start = await self.checkpoint(topic)
            if up_to_offset and up_to_offset <= start:
                return start
            directory = self.data_dir / topic.namespace / topic.local
            disk_first, pieces = await asyncio.to_thread(local_frames, directory, start, up_to_offset or None)
            if up_to_offset and disk_first is not None and disk_first > start:
                raise FailedPrecondition(
                    f"{topic}: offsets {start}..{disk_first - 1} are not on this disk (a gap before the range)"
                )
            at = start
            for frames in pieces:
                if frames[0].offset != at:
                    break  # not on disk (yet): the checkpoint never passes a hole
                recs = [f.record for f in frames]
                pts = [f.publish_time_ms for f in frames]
                data = encode_header(at, int(time.time() * 1000)) + encode_frames(at, recs, pts)
                nxt = at + len(frames)
                await put_object_and_descriptor(
                    self.objects,
                    self.meta,
                    self.keys,
                    topic,
                    at,
                    data,
                    next_offset=nxt,
                    max_publish_time_ms=max(pts),
                    broker_id=self.broker_id,
                    sealed=False,
                )
                self.uploaded_at[nxt] = time.monotonic()
                at = nxt
            return at

    async def Flush(self, request: up.FlushRequest, context: grpc.aio.ServicerContext) -> up.FlushResponse:
        self.calls.append((request.topic, request.up_to_offset))
        await self.hold.wait()
        if self.fail_with is not None:
            raise type(self.fail_with)(self.fail_with.message)
        if request.all_topics:
            raise Unavailable("the fake uploader flushes one topic at a time")
        topic = TopicName.parse(request.topic)
        uploaded = await self.upload(topic, request.up_to_offset)
        return up.FlushResponse(
            topics=[up.TopicProgress(topic=request.topic, uploaded_next_offset=uploaded)],
            uploaded_next_offset=uploaded,
        )


@asynccontextmanager
async def serving(uploader: FakeUploader) -> AsyncIterator[str]:
    """Serve ``uploader`` on a free loopback port; yields its ``host:port``."""
    server = new_server()
    up_grpc.add_WalUploaderServicer_to_server(uploader, server)
    port = bind(server, "127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)
