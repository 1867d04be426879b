"""The WAL uploader under faults: ``kill -9`` mid-upload, S3 refusing and timing out, and the
death of its broker. The uploader runs as a process; S3 is moto_server behind a FaultyProxy.

Invariants checked: every sealed segment ends up described exactly once, descriptors are
disjoint and contiguous from offset 0 (nothing skipped, nothing doubled), every object decodes
to exactly the records of its range, errors are counted, and a dead broker's tail is uploaded
and its true end recorded for the next owner.
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
from danube_common.objstore import ObjectStore, ObjectStoreConfig, open_object_store
from danube_common.storage import object_key
from danube_common.topic_name import TopicName
from tests.support import unique, wait_until
from tests.support.faulty_proxy import FaultyProxy
from tests.support.moto import MotoServer
from tests.unit.wal_uploader.helpers import (
    INCARNATION,
    UploaderClient,
    UploaderProcess,
    append,
    check_uploaded,
    checkpoint,
    open_log,
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
async def proxy(moto: MotoServer) -> AsyncIterator[FaultyProxy]:
    async with FaultyProxy("127.0.0.1", moto.port) as p:
        yield p


@pytest.fixture
async def objects(moto: MotoServer, bucket: str) -> AsyncIterator[ObjectStore]:
    """The bucket seen directly (not through the proxy), to check what was stored."""
    store = await open_object_store(ObjectStoreConfig.model_validate(s3_settings(moto.endpoint_url, bucket)))
    yield store
    await store.aclose()


@pytest.fixture
async def broker_lease(etcd_store: EtcdStore, keys: Keys) -> AsyncIterator[int]:
    """The broker's registration, on a lease the test revokes to "kill" the broker."""
    lease = await etcd_store.grant_lease(30)
    await etcd_store.put(keys.broker(BROKER), {"broker_id": BROKER}, lease=lease)
    await record_stint(etcd_store, keys, T, BROKER)  # the broker opened the topic: it writes its log
    yield lease
    await etcd_store.revoke_lease(lease)


def uploader(
    tmp_path: Path,
    etcd: EtcdProcess,
    cluster: str,
    endpoint: str,
    bucket: str,
    *,
    s3: dict[str, object] | None = None,
    **fields: object,
) -> UploaderProcess:
    timeouts = s3 if s3 is not None else {"request_timeout_s": 20.0, "read_timeout_s": 20.0}
    return UploaderProcess(
        tmp_path,
        broker_id=BROKER,
        data_dir=tmp_path / "data",
        etcd_endpoint=etcd.endpoint,
        cluster=cluster,
        object_store=s3_settings(endpoint, bucket, **timeouts),
        **fields,
    )


def swallowing(proxy: FaultyProxy) -> bool:
    """A request's bytes went into the blackhole: an upload is stuck in flight."""
    return any(c.tainted for c in proxy._conns)


async def test_kill9_mid_upload_then_restart_describes_every_segment_once(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    keys: Keys,
    cluster_name: str,
    bucket: str,
    proxy: FaultyProxy,
    objects: ObjectStore,
    broker_lease: int,
    tmp_path: Path,
) -> None:
    log = await write_topic(tmp_path / "data", T, 3000, roll=True)
    first = uploader(tmp_path, etcd_server, cluster_name, proxy.endpoint_url, bucket)
    try:
        async with first:

            async def some_uploaded() -> bool:
                return (await checkpoint(etcd_store, keys, T) or 0) > 0

            await wait_until(some_uploaded, timeout_s=20, what="first uploads")
            proxy.set_mode("blackhole")
            await append(log, 3000, 6000)  # more sealed segments, whose PUTs now hang
            await log.roll()
            await wait_until(lambda: swallowing(proxy), timeout_s=20, what="a PUT held by the blackhole")
            before = await checkpoint(etcd_store, keys, T)
            await first.kill9()
        proxy.set_mode("pass")
        sealed_end = max(int(p.stem) for p in log.directory.glob("*.wal"))
        assert before is not None and 0 < before < sealed_end
        assert await etcd_store.get(keys.uploader(BROKER)) is not None  # a kill -9 leaves it to its TTL

        async with uploader(tmp_path, etcd_server, cluster_name, proxy.endpoint_url, bucket):

            async def all_uploaded() -> bool:
                return await checkpoint(etcd_store, keys, T) == sealed_end

            await wait_until(
                all_uploaded, timeout_s=40, what="every sealed segment uploaded after the restart"
            )
        descs = await check_uploaded(etcd_store, keys, objects, T, end=sealed_end)
        # Once each: one descriptor per local segment, under its range's deterministic key.
        assert len(descs) == len(list(log.directory.glob("*.idx")))
        stint = await etcd_store.get(keys.storage_state(T))
        assert stint is not None
        assert all(
            d.object_key
            == object_key(
                T, d.start_offset, d.next_offset, incarnation=INCARNATION, revision=stint.mod_revision
            )
            for d in descs
        )
        keys_stored = [o.key for o in await objects.list(f"{T.namespace}/{T.local}/")]
        assert set(keys_stored) == {d.object_key for d in descs}  # no orphan either (same ranges)
    finally:
        await log.aclose()


async def test_s3_refusing_then_timing_out_then_back(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    keys: Keys,
    cluster_name: str,
    bucket: str,
    proxy: FaultyProxy,
    objects: ObjectStore,
    broker_lease: int,
    tmp_path: Path,
) -> None:
    proc = uploader(
        tmp_path,
        etcd_server,
        cluster_name,
        proxy.endpoint_url,
        bucket,
        s3={"request_timeout_s": 1.5, "read_timeout_s": 1.0},
        flush_timeout_s=1.0,
    )
    log = await open_log(tmp_path / "data" / T.namespace / T.local)
    client: UploaderClient | None = None
    try:
        async with proc:
            client = UploaderClient(proc.addr)
            proxy.set_mode("refuse")
            await append(log, 0, 4000)
            await log.roll()
            sealed_end = log.durable_offset

            async def errors(at_least: int) -> bool:
                return (await client.status()).upload_errors_total >= at_least  # type: ignore[union-attr]

            await wait_until(lambda: errors(3), timeout_s=20, what="refused uploads counted")
            # A Flush gives up after flush_timeout_s with UNAVAILABLE (the broker retries).
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.flush(T)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            [p] = (await client.status(T)).topics
            assert p.last_error and p.uploaded_next_offset == 0 and p.lag_bytes > 0

            proxy.set_mode("blackhole")
            so_far = (await client.status()).upload_errors_total
            await wait_until(lambda: errors(so_far + 2), timeout_s=20, what="timed-out uploads counted")
            assert await checkpoint(etcd_store, keys, T) is None

            proxy.set_mode("pass")

            async def all_uploaded() -> bool:
                return await checkpoint(etcd_store, keys, T) == sealed_end

            await wait_until(all_uploaded, timeout_s=30, what="uploads resumed")
            status = await client.status(T)
            assert status.topics[0].last_error == "" and status.upload_errors_total >= so_far + 2
            assert status.topics[0].upload_errors >= so_far + 2
        descs = await check_uploaded(etcd_store, keys, objects, T, end=sealed_end)
        assert len(descs) == len(list(log.directory.glob("*.idx")))
    finally:
        if client is not None:
            await client.aclose()
        await log.aclose()


async def test_broker_death_uploads_the_tail_and_records_the_true_end(
    etcd_server: EtcdProcess,
    etcd_store: EtcdStore,
    keys: Keys,
    cluster_name: str,
    bucket: str,
    moto: MotoServer,
    objects: ObjectStore,
    broker_lease: int,
    tmp_path: Path,
) -> None:
    await etcd_store.put(keys.owner(T), {"broker_id": BROKER})
    log = await write_topic(tmp_path / "data", T, 2500)  # sealed segments and an open tail
    end = log.durable_offset
    await log.aclose()  # the broker process is gone (its lock with it); nothing was sealed
    tail = max(log.directory.glob("*.wal"))
    tail.write_bytes(tail.read_bytes() + b"\x30\x00\x00\x00torn")  # a write cut short by the crash
    sealed_end = int(tail.stem)
    assert sealed_end < end
    async with uploader(tmp_path, etcd_server, cluster_name, moto.endpoint_url, bucket) as proc:
        client = UploaderClient(proc.addr)
        try:

            async def at(offset: int) -> bool:
                return await checkpoint(etcd_store, keys, T) == offset

            await wait_until(lambda: at(sealed_end), timeout_s=20, what="sealed segments uploaded")
            assert (await client.status()).broker_alive

            t0 = time.monotonic()
            await etcd_store.revoke_lease(broker_lease)  # the broker's lease ends

            async def closed() -> object:
                state = await etcd_store.get_json(keys.storage_state(T))
                return state if state and not state.get("open", True) else None

            state = await wait_until(closed, timeout_s=10, what="the dead broker's log end recorded")
            end_s = time.monotonic() - t0
            assert state["next_offset"] == end and state["closed_by"] == "uploader"  # type: ignore[index]
            await wait_until(lambda: at(end), timeout_s=20, what="the tail uploaded")
            tail_s = time.monotonic() - t0
            descs = await check_uploaded(etcd_store, keys, objects, T, end=end)
            assert descs[-1].next_offset == end and not descs[-1].sealed
            status = await client.status(T)
            assert not status.broker_alive and status.topics[0].final
            print(
                f"\nlog end recorded {end_s:.2f}s and the tail uploaded {tail_s:.2f}s after the broker's lease ended"
            )
        finally:
            await client.aclose()
