"""danube-history without Spark: options, the driver's plan (pruning, grouping) and the rows an
executor builds from an object's bytes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from danube_common.compression import Compression, compress
from danube_common.errors import ConfigError, CorruptData, DataLoss, InvalidTopicName
from danube_common.objstore import open_object_store
from danube_common.packing import pack
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.segment_objects import HistoryObject, Piece
from danube_common.topic_name import TopicName
from danube_common.wal.codec import encode_frames
from danube_common.wal.segment import encode_header
from danube_spark.history_options import parse_options
from danube_spark.history_plan import ReadTask, plan_reads
from danube_spark.history_rows import RowBuilder, read_task

pytestmark = pytest.mark.unit

T = TopicName("default", "orders")


def opts(**more: str) -> dict[str, str]:
    return {"topic": str(T), "object_store.local_dir": "/tmp/o", **more}


def test_options_map_onto_the_config_models() -> None:
    o = parse_options(
        {
            "TOPIC": "/default/orders",
            "object_store.backend": "s3",
            "object_store.S3.bucket": "danube",
            "object_store.s3.endpoint_url": "http://127.0.0.1:9000",
            "object_store.s3.path_style": "true",
            "etcd.endpoints": "a:2379, b:2379",
            "etcd.cluster": "prod",
            "start_offset": "5",
            "end_time": "2026-01-01T00:00:00Z",
            "decompress": "false",
        }
    )
    assert o.topic == T and o.object_store.s3.bucket == "danube" and o.object_store.s3.path_style
    assert o.etcd is not None and o.etcd.endpoints == ["a:2379", "b:2379"] and o.etcd.cluster == "prod"
    assert (o.start_offset, o.end_offset, o.start_time_ms, o.end_time_ms) == (5, None, None, 1767225600000)
    assert not o.decompress
    assert parse_options({"path": "/default/orders"}).topic == T
    assert parse_options({"topic": "/default/orders", "start_time": "1000"}).start_time_ms == 1000


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"topic": ""}, "option 'topic' is required"),
        ({"colour": "red"}, "unknown option 'colour'"),
        ({"start_offset": "x"}, "start_offset must be an integer"),
        ({"start_offset": "-1"}, "at least 0"),
        ({"start_offset": "9", "end_offset": "3"}, "end_offset 3 is below start_offset 9"),
        ({"start_time": "yesterday"}, "epoch milliseconds or an ISO-8601"),
        ({"decompress": "maybe"}, "true or false"),
        ({"object_store.backend": "s3"}, "s3.bucket"),
        ({"object_store.s3.colour": "red"}, "colour"),
        ({"etcd.cluster": "x"}, "etcd.endpoints"),
        ({"etcd.endpoints": "a:1", "incarnation": "3"}, "listing only"),
    ],
)
def test_bad_options_say_what_is_allowed(bad: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_options(opts(**bad))
    assert says in err.value.message


def test_bad_topic_name() -> None:
    with pytest.raises(InvalidTopicName):
        parse_options({"topic": "orders"})


def o(topic: TopicName, start: int, nxt: int, size: int = 100, max_pt: int = 0) -> HistoryObject:
    return HistoryObject(str(topic), f"{topic.local}/{start}", start, nxt, size, None, max_pt)


def test_plan_prunes_by_offset_and_time_and_groups() -> None:
    objects = {T: [o(T, 10 * i, 10 * i + 10, max_pt=1000 * (i + 1)) for i in range(6)]}
    everything = plan_reads(objects, parse_options(opts()))
    assert (everything.objects_found, everything.objects_read) == (6, 6)
    assert [len(t.pieces) for t in everything.tasks] == [6]
    assert everything.tasks[0].partition is None and everything.tasks[0].topic == str(T)

    some = plan_reads(
        objects, parse_options(opts(start_offset="15", end_offset="42", max_objects_per_partition="2"))
    )
    assert some.objects_read == 4 and some.objects_pruned == 2
    assert [[(p.lo, p.hi) for p in t.pieces] for t in some.tasks] == [
        [(15, 20), (20, 30)],
        [(30, 40), (40, 42)],
    ]

    recent = plan_reads(objects, parse_options(opts(start_time="4500")))
    assert [p.obj.start_offset for t in recent.tasks for p in t.pieces] == [40, 50]

    by_size = plan_reads(objects, parse_options(opts(max_partition_bytes="250")))
    assert [len(t.pieces) for t in by_size.tasks] == [2, 2, 2]


def test_plan_of_a_partitioned_topic_and_holes() -> None:
    p0, p1 = T.partition(0), T.partition(1)
    plan = plan_reads({p0: [o(p0, 0, 5), o(p0, 9, 12)], p1: [o(p1, 0, 3)]}, parse_options(opts()))
    assert [(t.partition, len(t.pieces)) for t in plan.tasks] == [(0, 2), (1, 1)]
    assert plan.holes == {str(p0): [(5, 9)]}


def msg(i: int, **kw: object) -> bytes:
    return pb.StreamMessage(payload=b"p%d" % i, attributes={"i": str(i)}, **kw).SerializeToString()  # type: ignore[arg-type]


def test_rows_from_an_object() -> None:
    recs = [
        msg(0, routing_key="k", schema_id=3, schema_version=1, producer_name="a", sequence_id=7),
        pb.StreamMessage(
            payload=compress(Compression.LZ4, b"big" * 100), compression=int(Compression.LZ4)
        ).SerializeToString(),
        pb.StreamMessage(
            payload=b"part", chunk=pb.MessageChunk(message_uuid="u", index=0, count=2, total_size=8)
        ).SerializeToString(),
        msg(3),
    ]
    data = encode_header(0, 1) + encode_frames(0, recs, [100, 200, 300, 400])
    piece = Piece(HistoryObject(str(T), "k0", 0, 4, len(data)), 1, 4)
    rows = RowBuilder(ReadTask(str(T), None, (piece,)), parse_options(opts(end_time="400")))
    assert rows.add_object(piece, data) == 2, "offset 0 is outside the piece, offset 3 past end_time"
    c = rows.cols
    assert c[2] == [1, 2] and c[6] == [b"big" * 100, b"part"] and c[12] == ["lz4", "none"]
    assert c[13] == [None, {"message_uuid": "u", "index": 0, "count": 2, "total_size": 8}]
    assert c[11] == [None, None] and c[14] == [None, None]  # no packs

    first = RowBuilder(ReadTask(str(T), 3, (piece,)), parse_options(opts()))
    first.add(0, 100, recs[0])
    assert [col[0] for col in first.cols][:2] == [str(T), 3]
    assert [col[0] for col in first.cols][4:11] == ["k", [("i", "0")], b"p0", "a", 3, 1, 7]

    bad_zstd = pb.StreamMessage(payload=b"not zstd", compression=int(Compression.ZSTD)).SerializeToString()
    bad = encode_header(0, 1) + encode_frames(0, [bad_zstd], [1])
    bad_piece = Piece(HistoryObject(str(T), "k9", 0, 1, len(bad)), 0, 1)
    with pytest.raises(
        CorruptData, match=r"object k9 of topic /default/orders, offset 0: zstd.*decompress=false"
    ):
        RowBuilder(ReadTask(str(T), None, (bad_piece,)), parse_options(opts())).add_object(bad_piece, bad)
    raw = RowBuilder(ReadTask(str(T), None, (bad_piece,)), parse_options(opts(decompress="false")))
    assert raw.add_object(bad_piece, bad) == 1 and raw.cols[6] == [b"not zstd"]

    damaged = bytearray(data)
    damaged[-2] ^= 1
    with pytest.raises(CorruptData, match="k0"):
        rows.add_object(piece, bytes(damaged))


def test_a_pack_is_a_row_per_message_or_one_row_as_stored() -> None:
    entries = [pb.StreamMessage(payload=f"order {i}".encode() * 20, publish_time=500 + i) for i in range(3)]
    entries[1].attributes["n"] = "1"
    pack_rec = pb.StreamMessage(
        payload=compress(Compression.ZSTD, pack(entries)),
        compression=int(Compression.ZSTD),
        batch_size=3,
        producer_name="p",
        routing_key="k",
        sequence_id=9,
    ).SerializeToString()
    recs = [pack_rec, pb.StreamMessage(payload=b"alone").SerializeToString()]
    data = encode_header(0, 1) + encode_frames(0, recs, [500, 600])
    piece = Piece(HistoryObject(str(T), "k0", 0, 2, len(data)), 0, 2)
    rows = RowBuilder(ReadTask(str(T), None, (piece,)), parse_options(opts()))
    assert rows.add_object(piece, data) == 4
    c = rows.cols
    assert c[2] == [0, 0, 0, 1] and c[11] == [0, 1, 2, None] and c[14] == [3, 3, 3, None]
    assert c[6] == [e.payload for e in entries] + [b"alone"]
    assert c[3] == [500, 501, 502, 600] and c[5][1] == [("n", "1")] and c[4][:3] == ["k"] * 3
    stored = RowBuilder(ReadTask(str(T), None, (piece,)), parse_options(opts(decompress="false")))
    assert stored.add_object(piece, data) == 2
    assert stored.cols[11] == [None, None] and stored.cols[14] == [3, None]
    assert stored.cols[6][0] == pb.StreamMessage.FromString(pack_rec).payload


def test_an_object_deleted_after_the_plan_is_a_data_loss_that_says_what_to_do(tmp_path: Path) -> None:
    """Retention may delete an object between the driver's listing and an executor's read."""
    data = encode_header(0, 1) + encode_frames(0, [msg(0), msg(1)], [100, 200])
    (tmp_path / "o").mkdir()
    kept = Piece(
        HistoryObject(
            str(T), "default/orders/00000000000000000000-00000000000000000002.wal", 0, 2, len(data)
        ),
        0,
        2,
    )
    gone = Piece(
        HistoryObject(
            str(T), "default/orders/00000000000000000002-00000000000000000004.wal", 2, 4, len(data)
        ),
        2,
        4,
    )
    options = parse_options({"topic": str(T), "object_store.local_dir": str(tmp_path / "o")})

    async def put() -> None:
        store = await open_object_store(options.object_store)
        await store.put(kept.obj.key, data)
        await store.aclose()

    asyncio.run(put())
    batches = list(read_task(ReadTask(str(T), None, (kept,)), options))
    assert sum(b.num_rows for b in batches) == 2
    with pytest.raises(
        DataLoss, match=r"offsets 2\.\.3\) is gone .* retention deleted it .* Run the query again"
    ):
        list(read_task(ReadTask(str(T), None, (kept, gone)), options))
