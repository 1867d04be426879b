"""The streaming source's offsets and options, and the sink's column check (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.errors import ConfigError, InvalidTopicName
from danube_spark.stream_offsets import Range, StartingOffsets, decode, encode, limit_end, ranges
from danube_spark.stream_options import SinkOptions, SourceOptions
from danube_spark.topic_io import covered

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:6650"


@pytest.mark.parametrize(
    ("start", "latest", "limit", "want"),
    [
        ({"a": 0, "b": 0}, {"a": 10, "b": 10}, None, {"a": 10, "b": 10}),
        ({"a": 0, "b": 0}, {"a": 10, "b": 10}, 6, {"a": 3, "b": 3}),
        # b needs only 1: a gets the rest of the budget
        ({"a": 0, "b": 5}, {"a": 10, "b": 6}, 6, {"a": 5, "b": 6}),
        # an odd remainder goes to the first partitions in name order
        ({"a": 0, "b": 0, "c": 0}, {"a": 9, "b": 9, "c": 9}, 4, {"a": 2, "b": 1, "c": 1}),
        ({"a": 0, "b": 0, "c": 0}, {"a": 9, "b": 9, "c": 9}, 2, {"a": 1, "b": 1, "c": 0}),
        # a partition only in latest (new) is taken as it is; one gone keeps its start
        ({"a": 4}, {"b": 7}, 3, {"a": 4, "b": 7}),
        # never below start (an end that went back: a re-created topic)
        ({"a": 8}, {"a": 5}, None, {"a": 8}),
    ],
)
def test_limit_end(
    start: dict[str, int], latest: dict[str, int], limit: int | None, want: dict[str, int]
) -> None:
    assert limit_end(start, latest, limit) == want


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1),
    st.integers(1, 200),
)
def test_limit_end_takes_at_most_the_budget_and_all_of_it_when_there_is_backlog(
    spans: dict[str, tuple[int, int]], limit: int
) -> None:
    start = {p: s for p, (s, _) in spans.items()}
    latest = {p: s + n for p, (s, n) in spans.items()}
    end = limit_end(start, latest, limit)
    taken = sum(end[p] - start[p] for p in start)
    assert all(start[p] <= end[p] <= latest[p] for p in start)
    assert taken == min(limit, sum(latest[p] - start[p] for p in start))


def test_ranges_skip_empty_and_new_partitions() -> None:
    assert ranges({"a": 0, "b": 3}, {"a": 5, "b": 3, "c": 9}) == [Range("a", 0, 5)]


def test_offsets_round_trip_and_bad_offsets_are_refused() -> None:
    assert encode({"b": 2, "a": 1}) == {"a": 1, "b": 2}
    assert decode({"a": 1}) == {"a": 1}
    with pytest.raises(ConfigError, match="expected an offset"):
        decode({"a": -1})


def test_starting_offsets() -> None:
    assert StartingOffsets.parse(None).default == "latest"
    assert StartingOffsets.parse("EARLIEST").default == "earliest"
    s = StartingOffsets.parse('{"/d/t-part-0": 42, "/d/u": "latest"}')
    assert s.for_partition("/d/t-part-0", "/d/t") == 42
    assert s.for_partition("/d/t-part-1", "/d/t") == "earliest"  # not named: earliest
    assert s.for_partition("/d/u-part-1", "/d/u") == "latest"  # named by its topic
    for bad in ("soon", "[1]", '{"/d/t": -1}', '{"/d/t": "first"}'):
        with pytest.raises(ConfigError, match="startingOffsets"):
            StartingOffsets.parse(bad)


def test_source_options() -> None:
    o = SourceOptions.parse({"service_url": URL, "topics": "/d/a, /d/b", "maxMessagesPerTrigger": "10"})
    assert o.topics == ("/d/a", "/d/b") and o.max_messages_per_trigger == 10 and o.fail_on_data_loss
    assert SourceOptions.parse({"SERVICE_URL": URL, "pattern": "/d/o-.*"}).pattern == "/d/o-.*"
    with pytest.raises(ConfigError, match="exactly one of the options topics"):
        SourceOptions.parse({"service_url": URL})
    with pytest.raises(ConfigError, match="service_url is required"):
        SourceOptions.parse({"topics": "/d/a"})
    with pytest.raises(InvalidTopicName):
        SourceOptions.parse({"service_url": URL, "topics": "orders"})
    with pytest.raises(ConfigError, match="maxMessagesPerTrigger must be >= 1"):
        SourceOptions.parse({"service_url": URL, "topics": "/d/a", "maxMessagesPerTrigger": "0"})
    with pytest.raises(ConfigError, match="failOnDataLoss must be true or false"):
        SourceOptions.parse({"service_url": URL, "topics": "/d/a", "failOnDataLoss": "maybe"})


def test_sink_options() -> None:
    o = SinkOptions.parse({"service_url": URL, "topic": "/d/out", "producerName": "counts"})
    assert o.topic == "/d/out" and o.producer_name == "counts" and o.reliable
    with pytest.raises(ConfigError, match="option topic is required"):
        SinkOptions.parse({"service_url": URL})
    with pytest.raises(ConfigError, match="producerName"):
        SinkOptions.parse({"service_url": URL, "topic": "/d/out", "producerName": "a b"})


@pytest.mark.parametrize(
    ("nxt", "skipped", "want"),
    [
        (5, [], 5),
        (5, [(5, 9)], 9),
        (5, [(2, 4), (5, 9), (9, 12)], 12),
        (5, [(7, 9)], 5),  # a gap before it: not covered
    ],
)
def test_covered(nxt: int, skipped: list[tuple[int, int]], want: int) -> None:
    assert covered(nxt, skipped) == want


def test_sink_columns() -> None:
    from pyspark.sql.types import BinaryType, IntegerType, MapType, StringType, StructField, StructType

    from danube_spark.sink import check_columns

    def schema(**cols: object) -> StructType:
        return StructType([StructField(n, t) for n, t in cols.items()])  # type: ignore[arg-type]

    s, b, i = StringType(), BinaryType(), IntegerType()
    check_columns(schema(payload=b))
    check_columns(schema(payload=s, key=s, attributes=MapType(s, s)))
    for bad, why in [
        (schema(value=s), "select them"),
        (schema(payload=s, id=i), "select them"),
        (schema(payload=i), "payload must be binary or string"),
        (schema(payload=s, key=i), "key must be a string"),
        (schema(payload=s, attributes=MapType(s, i)), "attributes must be map<string,string>"),
    ]:
        with pytest.raises(ConfigError, match=why):
            check_columns(bad)


def test_sink_messages_from_arrow_batches() -> None:
    import pyarrow as pa

    from danube_spark.sink import messages

    attrs = pa.array([[("a", "1")], None], type=pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["x", "y"]), pa.array(["k", None]), attrs], names=["Payload", "KEY", "attributes"]
    )
    assert list(messages(iter([batch]))) == [(b"x", "k", {"a": "1"}), (b"y", None, None)]
    only = pa.RecordBatch.from_arrays([pa.array([b"z"], type=pa.binary())], names=["payload"])
    assert list(messages(iter([only]))) == [(b"z", None, None)]
    null = pa.RecordBatch.from_arrays([pa.array([None], type=pa.binary())], names=["payload"])
    with pytest.raises(ConfigError, match="null payload"):
        list(messages(iter([null])))
