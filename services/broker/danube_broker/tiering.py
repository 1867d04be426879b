"""Object storage as the broker sees it: history readers, retention gate, the uploader client.

One :class:`Tiering` per broker (``app.run`` opens it when ``object_store`` or
``uploader_addr`` is configured; without both, reliable topics work as before):

- ``history(topic)``: the topic's :class:`~danube_broker.wal.remote.RemoteHistory` (descriptors
  listed from etcd), sharing the broker's chunk cache;
- ``retention_gate(topic, point)``: local segments are deleted only below the uploader's
  checkpoint (``storage/{topic}/uploaded``): ``min(point, checkpoint)``;
- ``delete_history(topic, deleted, kept)``: the objects of segments retention let go (their
  descriptors are gone already), and any orphan below the oldest kept segment;
- ``uploader``: the Flush client (``cloud`` acks, hand-overs, shutdown).
"""

from __future__ import annotations

import asyncio
import logging

from danube_broker.cloud import UploaderClient
from danube_broker.config import BrokerConfig
from danube_broker.wal.remote import ChunkCache, Positions, RemoteHistory
from danube_common.errors import DanubeError
from danube_common.objstore import ObjectStore, open_object_store
from danube_common.resources import Resources
from danube_common.service import internal_credentials
from danube_common.storage import SegmentDescriptor, parse_object_key
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: Topics flushed at once at shutdown.
_SHUTDOWN_FLUSHES = 8
#: Objects listed per pass when looking for orphans below a topic's oldest kept segment.
_ORPHANS_LISTED = 1000


class Tiering:
    def __init__(
        self,
        cfg: BrokerConfig,
        resources: Resources,
        *,
        objects: ObjectStore | None,
        uploader: UploaderClient | None,
    ) -> None:
        self._cfg = cfg
        self._res = resources
        self._keys = resources.keys
        self.objects = objects
        self.uploader = uploader
        self.cache = ChunkCache(cfg.remote_read_cache_bytes)
        self._positions = Positions()

    @classmethod
    async def open(cls, cfg: BrokerConfig, resources: Resources) -> Tiering | None:
        """None when neither object storage nor an uploader is configured."""
        if cfg.object_store is None and cfg.uploader_addr is None:
            return None
        objects = await open_object_store(cfg.object_store) if cfg.object_store is not None else None
        uploader = (
            UploaderClient(
                cfg.uploader_addr,
                timeout_s=cfg.uploader_rpc_timeout_s,
                credentials=internal_credentials(cfg),
            )
            if cfg.uploader_addr is not None
            else None
        )
        if objects is not None and uploader is None:
            log.warning(
                "object storage is configured but no uploader_addr: history is read from object storage, but "
                "'cloud' topics ack after fsync and topic moves drain their subscriptions as before"
            )
        if objects is None:
            log.warning(
                "uploader_addr is configured without object_store: 'cloud' acks and hand-over flushes use the "
                "uploader, but history below the local log cannot be read back"
            )
        return cls(cfg, resources, objects=objects, uploader=uploader)

    @property
    def skip_drain(self) -> bool:
        """Whether a topic move may hand over without draining: the hand-over flush puts the
        whole log into object storage and the new owner reads it from there."""
        return self.objects is not None and self.uploader is not None

    async def aclose(self) -> None:
        if self.uploader is not None:
            await self.uploader.aclose()
        if self.objects is not None:
            await self.objects.aclose()

    # ------------------------------------------------------------------ history
    async def history(self, topic: TopicName) -> RemoteHistory | None:
        if self.objects is None:
            return None
        return await RemoteHistory.open(
            topic,
            objects=self.objects,
            meta=self._res.store,
            keys=self._keys,
            cache=self.cache,
            chunk_bytes=self._cfg.remote_chunk_bytes,
            positions=self._positions,
        )

    async def retention_gate(self, topic: str, point: int) -> int:
        """Local segments may go only below the uploader's checkpoint."""
        checkpoint = await self.uploaded_next_offset(TopicName.parse(topic))
        return min(point, checkpoint)

    async def delete_history(
        self, topic: TopicName, deleted: list[SegmentDescriptor], kept: SegmentDescriptor | None
    ) -> int:
        """Delete the objects of ``deleted`` (descriptors retention removed from etcd already),
        then every other object of the topic wholly below ``kept`` (the oldest segment kept):
        objects an earlier pass could not delete, or that a crash left without a descriptor.
        Returns how many objects were deleted; failures are logged (the next pass retries)."""
        objects = self.objects
        if objects is None:
            return 0
        done = 0
        for d in deleted:
            try:
                await objects.delete(d.object_key)
                done += 1
            except DanubeError as exc:
                log.warning(
                    "topic %s: deleting object %s failed (%s); retried later", topic, d.object_key, exc
                )
        if kept is None:
            return done
        for prefix in sorted({d.object_key.rpartition("/")[0] + "/" for d in deleted}):
            try:
                listed = await objects.list(prefix, limit=_ORPHANS_LISTED)
            except DanubeError as exc:
                log.warning("topic %s: listing %s for orphans failed (%s)", topic, prefix, exc)
                continue
            for info in listed:
                parsed = parse_object_key(info.key)
                if parsed is None or parsed[0] != topic or parsed[2] > kept.start_offset:
                    continue
                try:
                    await objects.delete(info.key)
                    done += 1
                except DanubeError as exc:
                    log.warning("topic %s: deleting orphan %s failed (%s)", topic, info.key, exc)
        return done

    async def uploaded_next_offset(self, topic: TopicName) -> int:
        value = await self._res.store.get_json(self._keys.upload_checkpoint(topic))
        return int(value["next_offset"]) if isinstance(value, dict) and "next_offset" in value else 0

    # ------------------------------------------------------------------ flushes
    async def flush_all(self, log_ends: dict[str, int]) -> None:
        """At shutdown: ask the uploader to upload every given topic up to its log end (failures
        are logged: the uploader keeps shipping what is on disk)."""
        uploader = self.uploader
        if uploader is None or not log_ends:
            return
        gate = asyncio.Semaphore(_SHUTDOWN_FLUSHES)

        async def one(topic: str, end: int) -> None:
            async with gate:
                try:
                    uploaded = await uploader.flush(topic, end)
                except DanubeError as exc:
                    log.warning("topic %s: flush to object storage at shutdown failed: %s", topic, exc)
                    return
                if uploaded < end:
                    log.warning(
                        "topic %s: at shutdown object storage holds offsets up to %d of %d",
                        topic,
                        uploaded,
                        end,
                    )

        await asyncio.gather(*(one(t, end) for t, end in log_ends.items()))
        log.info("flushed %d reliable topic(s) to object storage", len(log_ends))
