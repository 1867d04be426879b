"""``danube-wal-uploader`` as a process, with a real etcd and a real S3 endpoint (moto_server).

Records are written through the broker's TopicLog with 64 KiB segments (many segments); the
uploader ships every sealed one, the descriptors are disjoint and contiguous from offset 0 and
every object decodes to exactly the records of its range; Flush with ``up_to_offset`` ships the
durable part of the open segment; Status reports progress and lag; the registration key lives
on a lease and goes away at a clean stop.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.metadata.lease import KeptLease
from danube_common.objstore import ObjectStore, ObjectStoreConfig, open_object_store
from danube_common.pb import DanubeWalUploader_pb2 as upb
from danube_common.topic_name import TopicName
from tests.support import unique, wait_until
from tests.support.moto import MotoServer
from tests.unit.wal_uploader.helpers import (
    UploaderClient,
    UploaderProcess,
    append,
    check_uploaded,
    checkpoint,
    record_stint,
    s3_settings,
    write_topic,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

BROKER = "b1"
T = TopicName("default", "orders")


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def bucket() -> str:
    return unique("wal").lower()


@pytest.fixture
async def objects(moto: MotoServer, bucket: str) -> AsyncIterator[ObjectStore]:
    cfg = ObjectStoreConfig.model_validate(s3_settings(moto.endpoint_url, bucket))
    store = await open_object_store(cfg)
    yield store
    await store.aclose()


@pytest.fixture
async def broker_registered(etcd_store: EtcdStore, keys: Keys) -> AsyncIterator[KeptLease]:
    """The broker's registration key, on a kept lease (as a live broker has it)."""
    lease = KeptLease(etcd_store, 5, name="fake broker")
    await lease.start()
    await etcd_store.put(keys.broker(BROKER), {"broker_id": BROKER}, lease=lease.lease_id)
    await record_stint(etcd_store, keys, T, BROKER)  # the broker opened the topic
    yield lease
    await lease.aclose()


async def test_uploads_sealed_segments_flushes_the_open_one_and_reports(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    keys: Keys,
    cluster_name: str,
    moto: MotoServer,
    bucket: str,
    objects: ObjectStore,
    broker_registered: KeptLease,
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    log = await write_topic(data_dir, T, 20_000)  # ~2.5 MB in 64 KiB segments
    proc = UploaderProcess(
        tmp_path,
        broker_id=BROKER,
        data_dir=data_dir,
        etcd_endpoint=etcd_server.endpoint,
        cluster=cluster_name,
        object_store=s3_settings(moto.endpoint_url, bucket),
    )
    client: UploaderClient | None = None
    try:
        t0 = time.monotonic()
        await proc.start()
        assert proc.info["service"] == "wal_uploader" and proc.info["broker_id"] == BROKER
        assert proc.info["url"] == f"http://{proc.addr}" and proc.info["pid"] == proc.proc.pid  # type: ignore[union-attr]
        registered = await etcd_store.get(keys.uploader(BROKER))
        assert registered is not None and registered.lease and registered.json()["addr"] == proc.addr

        sealed_end = max(int(p.stem) for p in log.directory.glob("*.wal"))
        n_sealed = len(list(log.directory.glob("*.idx")))
        assert n_sealed >= 30

        async def uploaded() -> bool:
            return await checkpoint(etcd_store, keys, T) == sealed_end

        await wait_until(uploaded, timeout_s=60, what="every sealed segment uploaded")
        elapsed = time.monotonic() - t0
        descs = await check_uploaded(etcd_store, keys, objects, T, end=sealed_end)
        assert len(descs) == n_sealed and descs[-1].next_offset == sealed_end  # not the open segment
        total = sum(d.size_bytes for d in descs)
        print(
            f"\nuploaded {len(descs)} objects, {total / 1e6:.1f} MB to moto in {elapsed:.2f}s (with start-up)"
        )

        client = UploaderClient(proc.addr)
        status = await client.status()
        assert status.broker_id == BROKER and status.broker_alive
        assert status.uploads_total == len(descs) and status.bytes_uploaded_total == total
        [p] = [t for t in status.topics if t.topic == str(T)]
        assert p.uploaded_next_offset == sealed_end and p.lag_bytes > 0 and p.last_error == ""
        assert p.local_next_offset == 20_000 and p.last_upload_at_ms > 0

        # Flush: the open segment up to the durable offset the broker passes (not further).
        durable = log.durable_offset
        resp = await client.flush(T, durable - 3)
        assert resp.uploaded_next_offset == durable - 3 == resp.topics[0].uploaded_next_offset
        descs = await check_uploaded(etcd_store, keys, objects, T, end=durable - 3)
        assert descs[-1].next_offset == durable - 3 and not descs[-1].sealed
        await append(log, 20_000, 100)
        resp = await client.flush(T, log.durable_offset)
        assert resp.uploaded_next_offset == 20_100
        await check_uploaded(etcd_store, keys, objects, T, end=20_100)
        [p] = (await client.status(T)).topics
        assert (p.uploaded_next_offset, p.local_next_offset, p.lag_bytes) == (20_100, 20_100, 0)

        # Bad requests are refused with a reason.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.flush(TopicName("default", "orders"), 50_000)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.stub.Flush(upb.FlushRequest(topic="bad"), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        assert await proc.stop() == 0
        assert await etcd_store.get(keys.uploader(BROKER)) is None  # lease revoked at a clean stop
        assert not proc.ready.exists()
    finally:
        if client is not None:
            await client.aclose()
        proc.kill_now()
        await log.aclose()
