"""``decode=true``: payloads decoded by their registry schema into a ``value`` struct column, on a
local SparkSession against a real local cluster (its lookup serves the schema registry).

- The streaming source on a topic bound to an Avro subject with two versions: messages written
  with either version come out typed by the latest (version 1's rows get the added field's
  default); a payload without a schema that does not decode gives a null ``value`` and a
  ``decode_error``, and the query goes on.
- ``danube-history`` on uploaded objects of a topic whose messages carry a JSON Schema subject's
  id: the driver asks the registry (no broker is read), the executors decode; a document that
  does not fit the schema's types gives a null ``value`` and the reason.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from danube_common.objstore.local import LocalObjectStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.storage import object_key
from danube_common.topic_name import TopicName
from danube_local.cluster import LocalCluster
from danube_sdk import AvroSchema, DanubeClient, DispatchStrategy
from danube_sdk.schema_registry import SchemaRegistryClient
from danube_spark.topic_io import run_async
from tests.spark.test_stream import QUERY_TIMEOUT_S
from tests.support import unique
from tests.support.segments import segment_object

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}


def test_the_stream_source_decodes_avro_payloads_by_their_writers_version(
    spark: Any, danube_cluster: LocalCluster, tmp_path: Path
) -> None:
    topic, subject = f"/default/{unique('typed')}", unique("orders")

    async def produce() -> None:
        async with DanubeClient(danube_cluster.service_url) as client:
            reliable = DispatchStrategy.RELIABLE
            # The first producer creates the topic (reliable) and, having a schema, binds it to
            # its subject (policy none).
            p1 = await client.create_producer(
                topic, schema=AvroSchema(V1, subject=subject), dispatch_strategy=reliable
            )
            for i in range(3):
                await p1.send({"id": i, "item": f"pen{i}", "lines": [{"sku": "a", "qty": i}], "note": None})
            p2 = await client.create_producer(
                topic, schema=AvroSchema(V2, subject=subject), dispatch_strategy=reliable
            )
            await p2.send({"id": 3, "item": "ink", "lines": [], "note": "gift", "channel": "app"})
            raw = await client.create_producer(topic, dispatch_strategy=reliable)
            await raw.send(b"\xff")  # no schema id: read as the latest version, and it does not decode

    run_async(produce())
    df = (
        spark.readStream.format("danube")
        .option("service_url", danube_cluster.service_url)
        .option("topics", topic)
        .option("startingOffsets", "earliest")
        .option("decode", "true")
        .load()
    )
    value_fields = [f.name for f in df.schema["value"].dataType.fields]
    assert df.columns[-2:] == ["value", "decode_error"] and value_fields == [
        "id",
        "item",
        "lines",
        "note",
        "channel",
    ]
    name = unique("decoded").replace("-", "_")
    q = (
        df.select("offset", "schema_version", "value", "decode_error")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish"
    rows = spark.sql(f"SELECT * FROM {name} ORDER BY offset").collect()
    assert [(r.offset, r.schema_version) for r in rows] == [(0, 1), (1, 1), (2, 1), (3, 2), (4, None)]
    for r in rows[:3]:
        assert r.decode_error is None
        assert r.value.asDict(recursive=True) == {
            "id": r.offset,
            "item": f"pen{r.offset}",
            "lines": [{"sku": "a", "qty": r.offset}],
            "note": None,
            "channel": "web",  # version 1 data read as version 2: the default
        }
    assert rows[3].value.asDict(recursive=True) == {
        "id": 3,
        "item": "ink",
        "lines": [],
        "note": "gift",
        "channel": "app",
    }
    assert rows[4].value is None
    assert rows[4].decode_error.startswith("payload does not decode as avro version 2")


PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "anyOf": [{"type": "object", "properties": {"city": {"type": "string"}}}, {"type": "null"}]
        },
    },
}


def test_the_history_reader_decodes_json_payloads_asking_only_the_registry(
    spark: Any, danube_cluster: LocalCluster, tmp_path: Path
) -> None:
    subject = unique("people")

    async def register() -> int:
        async with SchemaRegistryClient.connect(danube_cluster.service_url) as registry:
            reg = await registry.register(subject, "json_schema", json.dumps(PERSON).encode())
            return reg.schema_id

    schema_id = run_async(register())
    docs = [
        {"name": "ann", "age": 31, "tags": ["a"], "address": {"city": "Oslo"}},
        {"name": "bob", "age": 40},
        {"name": "cid", "age": "old"},  # does not fit: age is an integer
    ]
    recs = [
        pb.StreamMessage(
            payload=json.dumps(d).encode(), schema_id=schema_id, schema_version=1
        ).SerializeToString()
        for d in docs
    ]
    topic = TopicName("default", unique("people"))
    root = tmp_path / "objects"

    async def put() -> None:
        async with await LocalObjectStore.open(root) as store:
            data = segment_object(0, recs, [1_000, 1_001, 1_002])
            await store.put(object_key(topic, 0, 3, incarnation=1, revision=1), data)

    asyncio.run(put())
    df = (
        spark.read.format("danube-history")
        .option("topic", str(topic))
        .option("object_store.local_dir", str(root))
        .option("decode", "true")
        .option("schema_registry_url", danube_cluster.service_url)
        .option("schema_subject", subject)
        .load()
    )
    rows = sorted(df.select("offset", "value", "decode_error").collect(), key=lambda r: r.offset)
    assert [r.value.asDict(recursive=True) if r.value else None for r in rows] == [
        {"name": "ann", "age": 31, "tags": ["a"], "address": {"city": "Oslo"}},
        {"name": "bob", "age": 40, "tags": None, "address": None},
        None,
    ]
    assert [r.decode_error for r in rows] == [
        None,
        None,
        "decoded value does not fit the value column (version 1): $.age: expected bigint, got a string",
    ]
