"""``spark.read.format("danube-history")`` on a local SparkSession, reading objects laid out the
way the WAL uploader writes them (``tests.support.segments``: the same segment format, keys and
descriptors):

- the local directory store, objects found by listing (incarnations, an orphan object
  overlapping a described one, a partitioned topic), every column checked;
- moto S3 with descriptors in real etcd: offset and publish-time pruning, shown by the number of
  Spark partitions and by damaging a pruned object (the pruned reads still succeed);
- a damaged object fails the query with an error naming it; nothing is skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from danube_common.compression import Compression, compress
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.objstore import LocalObjectStore, ObjectStoreConfig, open_object_store
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.storage import object_key
from danube_common.topic_name import TopicName
from danube_spark.history_options import parse_options
from danube_spark.history_plan import HistoryPlan, plan_history
from tests.support import unique
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_SECRET_ACCESS_KEY, MotoServer
from tests.support.segments import put_history, segment_object

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def message(i: int, *, codec: Compression = Compression.NONE) -> pb.StreamMessage:
    m = pb.StreamMessage(
        payload=compress(codec, f"payload-{i}".encode() * 4),
        producer_name="p1",
        attributes={"n": str(i), "kind": "test"},
        sequence_id=i + 1,
        compression=int(codec),
    )
    if i % 2 == 0:
        m.routing_key = f"k{i % 3}"
        m.schema_id = 9
        m.schema_version = 2
    return m


def records(start: int, n: int, **kw: Any) -> list[bytes]:
    return [message(i, **kw).SerializeToString() for i in range(start, start + n)]


def read(spark: Any, topic: str, **options: Any) -> Any:
    r = spark.read.format("danube-history").option("topic", topic)
    for k, v in options.items():
        r = r.option(k.replace("__", "."), str(v))
    return r.load()


def offsets(df: Any) -> list[int]:
    return [r.offset for r in df.select("offset").orderBy("offset").collect()]


# ---------------------------------------------------------------- local directory, listing


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("objects")


def put_local(root: Path, key: str, data: bytes) -> None:
    async def go() -> None:
        async with await LocalObjectStore.open(root) as store:
            await store.put(key, data)

    asyncio.run(go())


def test_local_store_by_listing_every_column(spark: Any, local_dir: Path) -> None:
    topic = TopicName("default", unique("h"))
    key = lambda s, e, inc=7, rev=2: object_key(topic, s, e, incarnation=inc, revision=rev)  # noqa: E731
    put_local(
        local_dir,
        key(0, 4),
        segment_object(0, records(0, 4, codec=Compression.ZSTD), [5_000 + i for i in range(4)]),
    )
    put_local(local_dir, key(4, 9), segment_object(4, records(4, 5), [5_004 + i for i in range(5)]))
    put_local(local_dir, key(9, 12), segment_object(9, records(9, 3), [5_009 + i for i in range(3)]))
    # An upload whose transaction never happened (same offsets, cut shorter) and a deleted
    # incarnation's leftover: neither adds or duplicates a row.
    put_local(local_dir, key(4, 7, rev=1), segment_object(4, records(4, 3)))
    put_local(local_dir, key(0, 40, inc=3), segment_object(0, records(100, 40)))

    df = read(spark, str(topic), object_store__local_dir=local_dir, max_objects_per_partition=1)
    assert df.rdd.getNumPartitions() == 3
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.offset for r in rows] == list(range(12))
    for r in rows:
        want = message(r.offset)
        assert r.topic == str(topic) and r.partition is None
        assert r.payload == want.payload  # zstd payloads come back decompressed
        assert r.attributes == dict(want.attributes)
        assert r.key == (want.routing_key if want.HasField("routing_key") else None)
        assert r.schema_id == (9 if r.offset % 2 == 0 else None)
        assert r.schema_version == (2 if r.offset % 2 == 0 else None)
        assert r.producer_name == "p1" and r.sequence_id == r.offset + 1
        assert int(r.publish_time.timestamp() * 1000) == 5_000 + r.offset
        assert r.compression == ("zstd" if r.offset < 4 else "none")
        assert r.chunk is None
    raw = read(
        spark, str(topic), object_store__local_dir=local_dir, decompress="false", end_offset=1
    ).collect()
    assert raw[0].payload == compress(Compression.ZSTD, b"payload-0" * 4)


def test_partitioned_topic_reads_every_partition(spark: Any, local_dir: Path) -> None:
    base = TopicName("default", unique("parted"))
    for n in range(3):
        part = base.partition(n)
        put_local(
            local_dir, object_key(part, 0, 5, incarnation=11 + n), segment_object(0, records(10 * n, 5))
        )
    df = read(spark, str(base), object_store__local_dir=local_dir)
    got = sorted((r.partition, r.offset, r.attributes["n"]) for r in df.collect())
    assert got == [(n, o, str(10 * n + o)) for n in range(3) for o in range(5)]
    assert {r.topic for r in df.select("topic").collect()} == {str(base)}


def test_damaged_object_fails_the_query_naming_it(spark: Any, local_dir: Path) -> None:
    topic = TopicName("default", unique("bad"))
    good = object_key(topic, 0, 5, incarnation=4)
    bad = object_key(topic, 5, 10, incarnation=4)
    put_local(local_dir, good, segment_object(0, records(0, 5)))
    data = bytearray(segment_object(5, records(5, 5)))
    data[-3] ^= 0xFF  # a flipped bit in the last frame's record
    put_local(local_dir, bad, bytes(data))
    with pytest.raises(Exception) as err:
        read(spark, str(topic), object_store__local_dir=local_dir).collect()
    text = str(err.value)
    assert bad in text and "crc32c mismatch" in text and "not skipped" in text
    # The undamaged offsets are still readable on their own.
    assert offsets(read(spark, str(topic), object_store__local_dir=local_dir, end_offset=5)) == list(range(5))

    truncated = object_key(topic, 10, 15, incarnation=4)
    put_local(local_dir, truncated, segment_object(10, records(10, 5))[:-7])
    with pytest.raises(Exception) as err:
        read(spark, str(topic), object_store__local_dir=local_dir, start_offset=10).collect()
    assert truncated in str(err.value) and "offset 14" in str(err.value)


def test_topic_without_objects_reads_empty(spark: Any, local_dir: Path) -> None:
    assert read(spark, f"/default/{unique('none')}", object_store__local_dir=local_dir).collect() == []


def test_bad_option_is_refused_with_the_allowed_ones(spark: Any, local_dir: Path) -> None:
    with pytest.raises(Exception) as err:
        read(spark, "/default/x", object_store__local_dir=local_dir, start_ofset=3).collect()
    assert "unknown option 'start_ofset'" in str(err.value) and "start_offset" in str(err.value)


# ---------------------------------------------------------------- moto S3, descriptors in etcd

BUCKET = "danube-history"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


def s3_options(moto: MotoServer) -> dict[str, str]:
    return {
        "object_store__backend": "s3",
        "object_store__s3__endpoint_url": moto.endpoint_url,
        "object_store__s3__bucket": BUCKET,
        "object_store__s3__path_style": "true",
        "object_store__s3__access_key_id": MOTO_ACCESS_KEY_ID,
        "object_store__s3__secret_access_key": MOTO_SECRET_ACCESS_KEY,
    }


def s3_config(moto: MotoServer) -> ObjectStoreConfig:
    return ObjectStoreConfig.model_validate(
        {
            "backend": "s3",
            "s3": {
                "endpoint_url": moto.endpoint_url,
                "bucket": BUCKET,
                "path_style": True,
                "create_bucket": True,
                "access_key_id": MOTO_ACCESS_KEY_ID,
                "secret_access_key": MOTO_SECRET_ACCESS_KEY,
            },
        }
    )


def test_moto_s3_with_etcd_descriptors_prunes_by_offset_and_time(
    spark: Any, moto: MotoServer, etcd_server: EtcdProcess
) -> None:
    cluster = unique("c")
    topic = TopicName("default", unique("s3"))
    keys_by_object: list[str] = []

    async def upload() -> None:
        meta = EtcdStore([etcd_server.endpoint], request_timeout_s=5.0)
        async with await open_object_store(s3_config(moto)) as store:
            for i in range(5):  # objects of 10 offsets; object i published at 10_000 * (i + 1) + j
                times = [10_000 * (i + 1) + j for j in range(10)]
                d = await put_history(
                    store, meta, Keys(cluster), topic, 10 * i, records(10 * i, 10), publish_times_ms=times
                )
                keys_by_object.append(d.object_key)
        await meta.aclose()

    asyncio.run(upload())
    opts = {**s3_options(moto), "etcd__endpoints": etcd_server.endpoint, "etcd__cluster": cluster}
    opts["max_objects_per_partition"] = "1"

    def plan(**more: Any) -> HistoryPlan:
        return plan_history(
            parse_options(
                {"topic": str(topic), **{k.replace("__", "."): str(v) for k, v in {**opts, **more}.items()}}
            )
        )

    assert (plan().objects_read, len(plan().tasks)) == (5, 5)
    assert (
        plan(start_offset=22, end_offset=35).objects_read,
        plan(start_offset=22, end_offset=35).objects_pruned,
    ) == (2, 3)
    assert plan(start_time=40_005).objects_read == 2, "objects 3 and 4 only (the others are older)"

    by_offset = read(spark, str(topic), start_offset=22, end_offset=35, **opts)
    assert by_offset.rdd.getNumPartitions() == 2, "one Spark partition per object read"
    assert offsets(by_offset) == list(range(22, 35))
    window = read(spark, str(topic), start_time="1970-01-01T00:00:20.003Z", end_time=30_002, **opts)
    assert offsets(window) == [*range(13, 20), 20, 21]

    # Damage the first two objects: the pruned reads never fetch them, so they still succeed.
    async def damage() -> None:
        async with await open_object_store(s3_config(moto)) as store:
            for key in keys_by_object[:2]:
                await store.put(key, b"not a segment")

    asyncio.run(damage())
    assert offsets(read(spark, str(topic), start_offset=22, end_offset=35, **opts)) == list(range(22, 35))
    assert offsets(read(spark, str(topic), start_time=40_005, **opts)) == list(range(35, 50))
    with pytest.raises(Exception) as err:
        read(spark, str(topic), **opts).collect()
    assert keys_by_object[0] in str(err.value) or keys_by_object[1] in str(err.value)
    assert "not skipped" in str(err.value)


def test_moto_s3_by_listing(spark: Any, moto: MotoServer) -> None:
    topic = TopicName("default", unique("s3list"))

    async def upload() -> None:
        async with await open_object_store(s3_config(moto)) as store:
            for i in range(3):
                await store.put(
                    object_key(topic, 5 * i, 5 * i + 5, incarnation=2, revision=1),
                    segment_object(5 * i, records(5 * i, 5)),
                )

    asyncio.run(upload())
    df = read(spark, str(topic), start_offset=3, **s3_options(moto))
    assert offsets(df) == list(range(3, 15))
