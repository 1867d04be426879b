"""Reliable topics with their history in S3 (moto on loopback), on a full local cluster: brokers,
a WAL uploader per broker, load managers and leader replicas as processes, real etcd.

- Publish enough to roll many segments, let retention trim the local copies, then a new
  subscription from the earliest offset gets every message once, in order, served partly from
  object storage, then live messages.
- A ``cloud`` topic's broker is killed (``kill -9``) together with its uploader and its data
  directory is deleted: the topic's new owner serves every acknowledged message.
- A keyed topic compacted with ``danube-admin topics compact``: an SDK subscription with
  ``read_compacted`` gets each key's newest value, then the live log.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy, InitialPosition, SubType
from tests.e2e.conftest import cli, subprocess_env
from tests.e2e.control_plane import ENV, LEADERSHIP_TTL_S, REGISTRATION_TTL_S, etcd, owners
from tests.support import unique, wait_until
from tests.support.moto import MotoServer

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

BUCKET = "danube-e2e"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with MotoServer() as moto:
        store = {
            "BACKEND": "s3",
            "S3__ENDPOINT_URL": moto.endpoint_url,
            "S3__BUCKET": BUCKET,
            "S3__PATH_STYLE": "true",
            "S3__CREATE_BUCKET": "true",
            "S3__ACCESS_KEY_ID": "danube",
            "S3__SECRET_ACCESS_KEY": "danube-secret",
        }
        env = {
            **ENV,
            "DANUBE_BROKER_WAL__SEGMENT_MAX_BYTES": str(64 * 1024),
            "DANUBE_BROKER_RETENTION_CHECK_INTERVAL_S": "1",
            "DANUBE_BROKER_CLOUD_FLUSH_INTERVAL_MS": "50",
            "DANUBE_WAL_UPLOADER_SCAN_INTERVAL_S": "0.2",
            "DANUBE_WAL_UPLOADER_REGISTRATION_TTL_S": str(REGISTRATION_TTL_S),
        }
        c = LocalCluster(
            brokers=3,
            leaders=2,
            load_managers=2,
            uploaders=True,
            object_store=store,
            workdir=tmp_path_factory.mktemp("object-storage"),
            extra_env=env,
        )
        c.load_manager_flags = ["--leadership-ttl", str(LEADERSHIP_TTL_S)]
        c.start(timeout_s=90)
        try:
            yield c
        finally:
            c.stop()


def admin(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, *args],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip


def segments(cluster: LocalCluster, broker_id: str, topic: str) -> list[Path]:
    ns, name = topic.strip("/").split("/")
    return sorted((cluster.broker_data_dir(broker_id) / ns / name).glob("*.wal"))


async def publish(client: DanubeClient, topic: str, n: int, *, prefix: str) -> dict[str, int]:
    """Send ``n`` messages; payload -> offset of every acknowledged one."""
    producer = await client.create_producer(
        topic, producer_name=unique("p"), dispatch_strategy=DispatchStrategy.RELIABLE, send_timeout_s=60
    )
    futures = [await producer.send_async(f"{prefix}-{i}".encode() + b"x" * 200) for i in range(n)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    await producer.close()
    return {f"{prefix}-{i}": r.offset for i, r in enumerate(results) if not isinstance(r, BaseException)}


async def read_all(
    client: DanubeClient, topic: str, want: int, *, timeout_s: float = 60
) -> list[tuple[int, str]]:
    consumer = await client.subscribe(
        topic,
        subscription=unique("replay"),
        sub_type=SubType.EXCLUSIVE,
        initial_position=InitialPosition.EARLIEST,
    )
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"only {len(got)} of {want} messages replayed"
        for msg in await consumer.receive_many(1000, timeout_s=10):
            got.append((msg.offset, msg.payload.split(b"x", 1)[0].decode()))
            await consumer.ack(msg)
    await consumer.close()
    return got


async def test_replay_from_object_storage_then_live(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('history')}"
    r = admin(cluster, "topics", "create", topic, "--dispatch-strategy", "reliable")
    assert r.returncode == 0, r.stderr
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        # One subscription that acknowledges everything, so retention may trim local segments.
        reader = await client.subscribe(
            topic, subscription="ack-all", initial_position=InitialPosition.EARLIEST
        )
        acked = await publish(client, topic, 3000, prefix="h")
        assert len(acked) == 3000
        seen = 0
        while seen < 3000:
            for msg in await reader.receive_many(1000, timeout_s=10):
                await reader.ack(msg)
                seen += 1
        await reader.close()
        owner = (await owners(res))[topic].broker_id

        def trimmed() -> bool:  # the first local segment starts past offset 0
            segs = segments(cluster, owner, topic)
            return bool(segs) and int(segs[0].stem) > 0

        await wait_until(trimmed, timeout_s=60, interval_s=0.2, what="local segments trimmed after upload")
        first_local = int(segments(cluster, owner, topic)[0].stem)
        got = await read_all(client, topic, 3000)
        assert [o for o, _ in got] == sorted(acked.values()), "every message once, in offset order"
        assert {p for _, p in got} == set(acked)
        # Live messages after the replay reach a subscription that was replaying.
        live = await publish(client, topic, 200, prefix="live")
        after = await read_all(client, topic, 3200)
        assert {p for _, p in after[3000:]} == set(live)
    print(f"\nreplayed 3000 messages, offsets 0..{first_local - 1} from S3, the rest from the local log")


async def test_cloud_topic_survives_losing_its_broker_and_disk(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('cloud')}"
    r = admin(cluster, "topics", "create", topic, "--dispatch-strategy", "reliable", "--durability", "cloud")
    assert r.returncode == 0, r.stderr
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        acked = await publish(client, topic, 2000, prefix="c")
        assert len(acked) == 2000
        victim = (await owners(res))[topic].broker_id
        # The machine is gone: broker and uploader killed, the disk lost.
        cluster.signal(f"wal-uploader-{victim}", signal.SIGKILL)
        cluster.stop_broker(victim, kill=True)
        shutil.rmtree(cluster.broker_data_dir(victim))
        lost_at = time.monotonic()

        async def moved() -> bool:
            o = (await owners(res)).get(topic)
            return o is not None and o.broker_id != victim

        await wait_until(moved, timeout_s=REGISTRATION_TTL_S + 10, interval_s=0.1, what="topic re-placed")
        got = await read_all(client, topic, len(acked))
        served_after = time.monotonic() - lost_at
        assert {p for _, p in got} == set(acked), "every acknowledged message is served by the new owner"
        assert [o for o, _ in got] == sorted(acked.values())
        more = await publish(client, topic, 100, prefix="after")
        assert min(more.values()) == max(acked.values()) + 1, "offsets continue after the takeover"
    r = admin(cluster, "-o", "json", "topics", "describe", topic)
    assert json.loads(r.stdout)["broker_id"] != victim
    print(
        f"\ncloud topic: broker {victim} and its disk lost; all 2000 acked messages served {served_after:.1f}s later"
    )


async def test_a_compacted_topic_gives_each_keys_newest_value_through_the_cli_and_the_sdk(
    cluster: LocalCluster,
) -> None:
    """`danube-admin topics compact` on the owning broker (through the lookup), then an SDK
    subscription with read_compacted: below the horizon the newest value of each key (a
    tombstone drops its key, a keyless message is left out), then the live log."""
    topic = f"/default/{unique('table')}"
    r = admin(cluster, "topics", "create", topic, "--dispatch-strategy", "reliable")
    assert r.returncode == 0, r.stderr
    async with DanubeClient(cluster.service_url) as client:
        producer = await client.create_producer(
            topic, producer_name=unique("p"), dispatch_strategy=DispatchStrategy.RELIABLE, send_timeout_s=60
        )
        futures = [await producer.send_async(f"v{i}".encode(), key=f"k{i % 30}") for i in range(300)]
        futures.append(await producer.send_async(b"", key="k0"))  # a tombstone: k0 is deleted
        futures.append(await producer.send_async(b"no key"))
        await asyncio.gather(*futures)

        r = admin(cluster, "-o", "json", "topics", "compact", topic)
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert (info["horizon"], info["keys"]) == (302, 29), info
        r = admin(cluster, "-o", "json", "topics", "stats", topic)
        assert json.loads(r.stdout)["compaction"]["horizon"] == 302

        consumer = await client.subscribe(
            topic, subscription="view", initial_position=InitialPosition.EARLIEST, read_compacted=True
        )
        await (await producer.send_async(b"after", key="k0"))
        newest: dict[str | None, bytes] = {}
        offsets: list[int] = []
        deadline = time.monotonic() + 30
        while newest.get("k0") != b"after":
            assert time.monotonic() < deadline, f"compacted read incomplete: {sorted(offsets)}"
            for msg in await consumer.receive_many(100, timeout_s=10):
                newest[msg.key] = msg.payload
                offsets.append(msg.offset)
                await consumer.ack(msg)
        await consumer.close()
        await producer.close()
    assert newest == {**{f"k{k}": f"v{270 + k}".encode() for k in range(1, 30)}, "k0": b"after"}
    assert offsets == sorted(offsets) and offsets[-1] == 302 and len(offsets) < 300, (
        "only the view, then the tail"
    )
