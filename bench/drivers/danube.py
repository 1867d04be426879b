"""Danube for Python through our SDK: a LocalCluster (etcd + lookup + 1 broker, as processes).

``danube``: reliable topics with durability ``fsync`` (a batch is acked after its WAL fsync);
``danube-none``: reliable topics with durability ``none`` (acked once written to the page cache, the
setting to compare with JetStream's default, which does not fsync before acking); ``danube-cloud``:
durability ``cloud`` (acked once the batch is in object storage: the broker's WAL uploader ships it to a
local-directory object store; every ``cloud_flush_interval_ms``, 200 ms by default). Non-reliable topics
are in memory for both (one shared subscription per name). Topics are made with the admin API (TopicAdmin.CreateTopic); producers publish
pipelined batches; consumers start at EARLIEST on reliable topics, read with ``receive_many`` and ack every message.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import grpc.aio

from bench.drivers.base import ConsumerHandle, Driver, DriverUnavailable, ProducerHandle
from danube_common.grpc_util import strip_scheme
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc

NAMESPACE = "/default/"
RECEIVE_MAX = 1000


class _Producer(ProducerHandle):
    def __init__(self, producer: Any) -> None:
        self._p = producer

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        return await self._p.send_async(payload)  # type: ignore[no-any-return]

    async def flush(self) -> None:
        await self._p.flush()

    async def close(self) -> None:
        await self._p.close()


class _Consumer(ConsumerHandle):
    def __init__(self, consumer: Any) -> None:
        self._c = consumer

    async def receive(self) -> list[bytes]:
        msgs = await self._c.receive_many(RECEIVE_MAX)
        ack = self._c.ack
        for m in msgs:
            await ack(m)
        return [m.payload for m in msgs]

    async def close(self) -> None:
        await self._c.close()


class DanubeDriver(Driver):
    name = "danube"
    durability = "fsync before ack"
    wal_durability = "fsync"
    #: Run a WAL uploader next to each broker (object storage: a directory in the work dir).
    with_uploaders = False

    def __init__(self, *, brokers: int = 1) -> None:
        self._brokers = brokers
        self._cluster: Any = None
        self._client: Any = None
        self._reliable: dict[str, bool] = {}  # topic -> dispatch, for producers and consumers

    def durability_of(self, *, reliable: bool) -> str:
        return self.durability if reliable else "in memory (non-reliable)"

    async def start(self, workdir: Path) -> None:
        if self._cluster is not None:
            return
        try:
            from danube_local.cluster import LocalCluster
            from danube_sdk import DanubeClient
        except ImportError as exc:
            raise DriverUnavailable(f"danube packages not importable ({exc}): run scripts/setup.sh") from exc
        await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
        cluster = LocalCluster(
            brokers=self._brokers, workdir=workdir, log_level="WARNING", uploaders=self.with_uploaders
        )
        await asyncio.to_thread(cluster.start)
        self._cluster = cluster
        self._client = DanubeClient(cluster.service_url)

    async def stop(self) -> None:
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 20)
        if cluster is not None:
            await asyncio.to_thread(cluster.stop)

    def client_spec(self) -> dict[str, Any]:
        assert self._cluster is not None, "start() the driver first"
        return {"service_url": self._cluster.service_url, "reliable": dict(self._reliable)}

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> DanubeDriver:
        from danube_sdk import DanubeClient

        driver = cls()
        driver._client = DanubeClient(spec["service_url"])  # no cluster: stop() closes the client only
        driver._reliable = {str(t): bool(r) for t, r in spec["reliable"].items()}
        return driver

    def server_pids(self) -> list[int]:
        c = self._cluster
        if c is None:
            return []
        pids = [b.pid for b in c.brokers] + [c.lookup.pid] + [u.pid for u in c.uploaders.values()]
        if c.etcd is not None and c.etcd.proc is not None:
            pids.append(c.etcd.proc.pid)
        return pids

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        req = apb.CreateTopicRequest(
            name=NAMESPACE + topic,
            partitions=partitions if partitions > 1 else 0,
            dispatch_strategy="reliable" if reliable else "non_reliable",
            durability=self.wal_durability if reliable else "",
        )
        async with grpc.aio.insecure_channel(strip_scheme(self._cluster.admin_url)) as ch:
            await apb_grpc.TopicAdminStub(ch).CreateTopic(req, timeout=30)
        self._reliable[topic] = reliable

    async def producer(self, topic: str) -> ProducerHandle:
        from danube_sdk import DispatchStrategy

        reliable = self._reliable.get(topic, False)
        p = await self._client.create_producer(
            NAMESPACE + topic,
            dispatch_strategy=DispatchStrategy.RELIABLE if reliable else DispatchStrategy.NON_RELIABLE,
        )
        return _Producer(p)

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        from danube_sdk import InitialPosition, SubType

        reliable = self._reliable.get(topic, False)
        c = await self._client.subscribe(
            NAMESPACE + topic,
            subscription=subscription,
            sub_type=SubType.SHARED,
            initial_position=InitialPosition.EARLIEST if reliable else InitialPosition.LATEST,
        )
        return _Consumer(c)


class DanubeNoneDriver(DanubeDriver):
    name = "danube-none"
    durability = "page cache, no fsync before ack"
    wal_durability = "none"


class DanubeCloudDriver(DanubeDriver):
    name = "danube-cloud"
    durability = "cloud: acked after upload to object storage (local-dir store, after the WAL fsync)"
    wal_durability = "cloud"
    with_uploaders = True
