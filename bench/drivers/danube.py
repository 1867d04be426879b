"""Danube for Python through our SDK: a LocalCluster (etcd + lookup + 1 broker, as processes).

``danube-nomux``: ``danube`` without the SDK's multiplexed streams (a stream per producer and
consumer). ``danube``: reliable topics with durability ``fsync`` (a batch is acked after its WAL fsync);
``danube-none``: reliable topics with durability ``none`` (acked once written to the page cache, the
setting to compare with JetStream's default, which does not fsync before acking); ``danube-cloud``:
durability ``cloud`` (acked once the batch is in object storage: the broker's WAL uploader ships it to a
local-directory object store; every ``cloud_flush_interval_ms``, 200 ms by default). Non-reliable topics
are in memory for both (one shared subscription per name). Topics are made with the admin API (TopicAdmin.CreateTopic); producers publish
pipelined batches; consumers start at EARLIEST on reliable topics, read with ``receive_many`` and ack every message.

The cluster and the client side go through hooks (``_configure``, ``_connect``, ``_admin_channel``,
``_producer_client``, ``_consumer_client``) so that ``danube-secure`` and ``danube-tls``
(bench/drivers/danube_secure.py) run the same workloads over TLS, with and without tokens and RBAC.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, ClassVar

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


async def close_client(client: Any) -> None:
    """Close a DanubeClient (None: nothing), giving up after 20 s; errors are ignored (tear-down)."""
    if client is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 20)


class DanubeDriver(Driver):
    name = "danube"
    durability = "fsync before ack"
    wal_durability = "fsync"
    #: Run a WAL uploader next to each broker (object storage: a directory in the work dir).
    with_uploaders = False
    #: Extra create_producer options (a variant driver's difference from ``danube``).
    producer_kwargs: ClassVar[dict[str, Any]] = {}
    #: Start the cluster secured (TLS, mTLS, JWT, RBAC: LocalCluster(secure=True)).
    secure = False
    #: The SDK's multiplexed streams (one PublishMux and one ConsumeMux per broker for every
    #: producer and consumer of the client); ``danube-nomux``: a stream per producer/consumer.
    multiplex = True

    def __init__(self, *, brokers: int = 1) -> None:
        self._brokers = brokers
        self._cluster: Any = None
        self._client: Any = None
        self._reliable: dict[str, bool] = {}  # topic -> dispatch, for producers and consumers
        #: One admin channel for the driver's life (``create_topic``). Not one per topic: closing
        #: this process's last channel starts gRPC's shutdown in a thread, and the fork of the
        #: client workers right after it deadlocked in gRPC's pre-fork handler.
        self._admin: grpc.aio.Channel | None = None

    def durability_of(self, *, reliable: bool) -> str:
        return self.durability if reliable else "in memory (non-reliable)"

    async def start(self, workdir: Path) -> None:
        if self._cluster is not None:
            return
        try:
            import danube_sdk  # noqa: F401  (checked here: without the SDK the driver is skipped)
            from danube_local.cluster import LocalCluster
        except ImportError as exc:
            raise DriverUnavailable(f"danube packages not importable ({exc}): run scripts/setup.sh") from exc
        await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
        cluster = LocalCluster(
            brokers=self._brokers,
            workdir=workdir,
            log_level="WARNING",
            uploaders=self.with_uploaders,
            secure=self.secure,
        )
        self._configure(cluster)
        await asyncio.to_thread(cluster.start)
        self._cluster = cluster
        self._connect(self.client_spec())

    def _configure(self, cluster: Any) -> None:
        """Adjust the LocalCluster before it starts (here: nothing)."""

    def _connect(self, spec: dict[str, Any]) -> None:
        """Make the client(s) ``producer`` and ``consumer`` use, from a ``client_spec()`` (here one
        plaintext client)."""
        from danube_sdk import DanubeClient

        self._client = DanubeClient(spec["service_url"], multiplex=self.multiplex)

    async def _close_clients(self) -> None:
        client, self._client = self._client, None
        await close_client(client)

    async def _producer_client(self) -> Any:
        return self._client

    async def _consumer_client(self) -> Any:
        return self._client

    def _admin_channel(self) -> grpc.aio.Channel:
        """A channel to the admin API (creating topics is set-up, not measured)."""
        return grpc.aio.insecure_channel(strip_scheme(self._cluster.admin_url))

    async def stop(self) -> None:
        cluster, self._cluster = self._cluster, None
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(admin.close(), 20)
        await self._close_clients()
        if cluster is not None:
            await asyncio.to_thread(cluster.stop)

    def client_spec(self) -> dict[str, Any]:
        assert self._cluster is not None, "start() the driver first"
        return {"service_url": self._cluster.service_url, "reliable": dict(self._reliable)}

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> DanubeDriver:
        driver = cls()
        driver._connect(spec)  # no cluster: stop() closes the client(s) only
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

    def broker_pids(self) -> list[int]:
        return [b.pid for b in self._cluster.brokers] if self._cluster is not None else []

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        req = apb.CreateTopicRequest(
            name=NAMESPACE + topic,
            partitions=partitions if partitions > 1 else 0,
            dispatch_strategy="reliable" if reliable else "non_reliable",
            durability=self.wal_durability if reliable else "",
        )
        if self._admin is None:
            self._admin = self._admin_channel()
        await apb_grpc.TopicAdminStub(self._admin).CreateTopic(req, timeout=30)
        self._reliable[topic] = reliable

    async def producer(self, topic: str) -> ProducerHandle:
        from danube_sdk import DispatchStrategy

        reliable = self._reliable.get(topic, False)
        client = await self._producer_client()
        p = await client.create_producer(
            NAMESPACE + topic,
            dispatch_strategy=DispatchStrategy.RELIABLE if reliable else DispatchStrategy.NON_RELIABLE,
            **self.producer_kwargs,
        )
        return _Producer(p)

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        from danube_sdk import InitialPosition, SubType

        reliable = self._reliable.get(topic, False)
        client = await self._consumer_client()
        c = await client.subscribe(
            NAMESPACE + topic,
            subscription=subscription,
            sub_type=SubType.SHARED,
            initial_position=InitialPosition.EARLIEST if reliable else InitialPosition.LATEST,
        )
        return _Consumer(c)


class DanubeLinger2Driver(DanubeDriver):
    """``danube`` with the SDK's batching as before 29 Nov 2026: a partial batch goes after a
    2 ms linger even while earlier ones are unacknowledged (``batching_max_publish_delay_ms=2``),
    instead of waiting for their acks (up to 100 ms); for same-run comparisons."""

    name = "danube-linger2"
    producer_kwargs: ClassVar[dict[str, Any]] = {"batching_max_publish_delay_ms": 2.0}


class DanubeNoneDriver(DanubeDriver):
    name = "danube-none"
    durability = "page cache, no fsync before ack"
    wal_durability = "none"


class DanubeCloudDriver(DanubeDriver):
    name = "danube-cloud"
    durability = "cloud: acked after upload to object storage (local-dir store, after the WAL fsync)"
    wal_durability = "cloud"
    with_uploaders = True


class DanubePerTopicCommitDriver(DanubeDriver):
    """``danube`` with ``wal.shared_commit: false``: a WAL writer task per topic (one thread hop
    and one fsync per topic per commit), as before the broker-wide commit scheduler; for
    same-run comparisons with ``danube`` (bench/README.md)."""

    name = "danube-pertopic"

    def _configure(self, cluster: Any) -> None:
        cluster.extra_env["DANUBE_BROKER_WAL__SHARED_COMMIT"] = "false"


class DanubeJournalDriver(DanubeDriver):
    """``danube`` with ``wal.commit_sync: journal``: a round is made durable by one append +
    fdatasync of the broker's commit journal, the topic files flushed by background checkpoints;
    for same-run comparisons with ``danube``."""

    name = "danube-journal"

    def _configure(self, cluster: Any) -> None:
        cluster.extra_env["DANUBE_BROKER_WAL__COMMIT_SYNC"] = "journal"


class DanubeFilesSyncDriver(DanubeDriver):
    """``danube`` with ``wal.commit_sync: files``: a shared round flushed by one fdatasync per
    topic file (over ``commit_fsync_threads`` threads) instead of one syncfs; for same-run
    comparisons with ``danube``."""

    name = "danube-files"

    def _configure(self, cluster: Any) -> None:
        cluster.extra_env["DANUBE_BROKER_WAL__COMMIT_SYNC"] = "files"


class DanubeThreadWritesDriver(DanubeDriver):
    """``danube`` with ``wal.round_loop_write_bytes: 0``: every frame write of a shared WAL
    round in the worker thread (each waiting for the GIL after its system call), as before the
    round's page-cache writes moved to the event loop; for same-run comparisons."""

    name = "danube-threadwrites"

    def _configure(self, cluster: Any) -> None:
        cluster.extra_env["DANUBE_BROKER_WAL__ROUND_LOOP_WRITE_BYTES"] = "0"


class DanubeNoMuxDriver(DanubeDriver):
    """``danube`` with the SDK's per-topic streams (``multiplex=False``): a PublishBatches stream
    and a HealthCheck poll per producer, a ReceiveBatches stream, a poll and unary AckBatch calls
    per consumer; the baseline of the multiplexed streams."""

    name = "danube-nomux"
    multiplex = False
