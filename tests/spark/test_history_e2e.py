"""End to end: messages produced through a real broker land in object storage through the real
WAL uploader, and ``danube-history`` reads them back with Spark, with no broker involved.

A cluster of etcd, a lookup, one broker and its WAL uploader (processes, local directory object
store). A partitioned ``cloud`` topic acknowledges a message only once its batch is uploaded, so
every acknowledged message is in object storage when the producers are done: Spark must return
exactly those, in both ways of finding the objects (etcd descriptors, object store listing).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from danube_common.etcd_server import EtcdProcess
from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy
from danube_sdk.types import MessageId
from tests.e2e.conftest import cli, subprocess_env
from tests.support import unique

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(240)]

PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, etcd_server: EtcdProcess) -> Iterator[LocalCluster]:
    env = {
        "DANUBE_BROKER_CLOUD_FLUSH_INTERVAL_MS": "20",
        "DANUBE_BROKER_WAL__SEGMENT_MAX_BYTES": str(32 * 1024),
        "DANUBE_WAL_UPLOADER_SCAN_INTERVAL_S": "0.2",
    }
    c = LocalCluster(
        brokers=1,
        uploaders=True,
        workdir=tmp_path_factory.mktemp("history-e2e"),
        etcd_endpoint=etcd_server.endpoint,
        cluster=unique("hist"),
        extra_env=env,
    )
    c.start(timeout_s=90)
    try:
        yield c
    finally:
        c.stop()


async def produce(
    cluster: LocalCluster, topic: str
) -> dict[tuple[int, int], tuple[bytes, str, dict[str, str]]]:
    """(partition, offset) -> (payload, key, attributes) of every acknowledged message."""
    sent: dict[tuple[int, int], tuple[bytes, str, dict[str, str]]] = {}
    async with DanubeClient(cluster.service_url) as client:
        for codec in ("none", "zstd"):
            producer = await client.create_producer(
                topic,
                producer_name=unique(f"p-{codec}"),
                dispatch_strategy=DispatchStrategy.RELIABLE,
                compression=codec,
                send_timeout_s=60,
            )
            futures = []
            for i in range(100):
                payload, key, props = (
                    f"{codec}-{i}-".encode() * 20,
                    f"k{i % 7}",
                    {"i": str(i), "codec": codec},
                )
                futures.append(
                    ((payload, key, props), await producer.send_async(payload, key=key, properties=props))
                )
            for want, fut in futures:
                mid: MessageId = await fut
                sent[(int(mid.topic.rsplit("-part-", 1)[1]), mid.offset)] = want
            await producer.close()
    return sent


def test_produced_through_a_broker_read_back_from_object_storage(spark: Any, cluster: LocalCluster) -> None:
    topic = f"/default/{unique('orders')}"
    r = subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, "topics", "create", topic,
         "--partitions", str(PARTITIONS), "--dispatch-strategy", "reliable", "--durability", "cloud"],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    sent = asyncio.run(produce(cluster, topic))
    assert len(sent) == 200 and {p for p, _ in sent} == set(range(PARTITIONS))

    by_etcd = {"etcd.endpoints": cluster.etcd_endpoint, "etcd.cluster": cluster.cluster}
    by_listing: dict[str, str] = {}
    for how in (by_etcd, by_listing):
        reader = spark.read.format("danube-history").option(
            "object_store.local_dir", str(cluster.objects_dir)
        )
        for k, v in how.items():
            reader = reader.option(k, v)
        rows = reader.load(topic).collect()
        got = {(r.partition, r.offset): (r.payload, r.key, r.attributes) for r in rows}
        assert len(rows) == len(got), f"no message twice ({'etcd' if how else 'listing'})"
        assert got == sent, f"exactly the acknowledged messages ({'etcd' if how else 'listing'})"
        assert {r.topic for r in rows} == {topic}
        assert {r.compression for r in rows} == {"none", "zstd"}, "zstd payloads were stored compressed"
