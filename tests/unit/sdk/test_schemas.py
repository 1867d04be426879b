"""Typed schemas: the codecs (bytes in, bytes out, no sockets), and producers/consumers with a
schema against the fake cluster and its in-memory registry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest
from google.protobuf import api_pb2, descriptor_pb2, timestamp_pb2

from danube_common.errors import InvalidArgument, InvalidPayload, InvalidSchema, NotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.schema import CompatibilityMode, SchemaType, compile_schema
from danube_sdk import (
    AvroSchema,
    DanubeClient,
    JsonSchema,
    Message,
    ProtobufSchema,
    SchemaReference,
)
from danube_sdk.schema_registry import (
    COMPATIBILITY_MODES,
    SCHEMA_TYPES,
    SchemaInfo,
    compatibility_mode_of,
    decoder_for,
    schema_type_of,
)
from danube_sdk.schemas import descriptor_set_of
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/typed"


class Order(pydantic.BaseModel):
    id: int
    item: str
    qty: int = 1


@dataclass
class Point:
    x: float
    y: float


ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int", "default": 1},
    ],
}


def valid_for_registry(schema: Any, payload: bytes) -> str | None:
    """What the broker's validator says of ``payload`` (None: valid)."""
    return compile_schema(schema.schema_type, schema.definition()).validate(payload)


# ---------------------------------------------------------------------------- JSON


def test_json_pydantic_model_round_trip_and_definition() -> None:
    schema = JsonSchema(Order, subject="orders")
    assert json.loads(schema.definition()) == Order.model_json_schema()
    payload = schema.encode(Order(id=7, item="book"))
    assert json.loads(payload) == {"id": 7, "item": "book", "qty": 1}
    assert valid_for_registry(schema, payload) is None
    assert schema.decode(payload) == Order(id=7, item="book")
    with pytest.raises(InvalidPayload, match="expected a Order"):
        schema.encode({"id": 7, "item": "book"})  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload, match="does not decode"):
        schema.decode(b'{"id": "seven"}')


def test_json_dataclass_through_type_adapter() -> None:
    schema = JsonSchema(Point, subject="points")
    doc = json.loads(schema.definition())
    assert doc["required"] == ["x", "y"] and doc["properties"]["x"]["type"] == "number"
    payload = schema.encode(Point(1.5, 2))
    assert valid_for_registry(schema, payload) is None
    assert schema.decode(payload) == Point(1.5, 2.0)


def test_json_document_with_local_validation() -> None:
    doc = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    loose = JsonSchema(doc, subject="raw")
    strict = JsonSchema(doc, subject="raw", validate=True)
    assert strict.encode({"a": 1}) == b'{"a":1}' and strict.decode(b'{"a": 2}') == {"a": 2}
    assert loose.encode({"a": "x"}) == b'{"a":"x"}'  # not checked: the broker may refuse it
    with pytest.raises(InvalidPayload, match=r"at \$\.a: 'x' is not of type 'integer'"):
        strict.encode({"a": "x"})
    with pytest.raises(InvalidPayload, match="cannot encode"):
        strict.encode({"a": float("nan")})


# ---------------------------------------------------------------------------- Avro


def test_avro_schemaless_binary_is_what_the_broker_validates() -> None:
    schema = AvroSchema(ORDER_AVRO, subject="orders")
    payload = schema.encode({"id": 5, "item": "pen"})  # qty from its default
    assert payload == b"\x0a\x06pen\x02"  # zigzag 5, length 3 + "pen", zigzag 1: no header
    assert valid_for_registry(schema, payload) is None
    assert schema.decode(payload) == {"id": 5, "item": "pen", "qty": 1}
    assert AvroSchema(json.dumps(ORDER_AVRO), subject="o").definition() == schema.definition()


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"id": "five", "item": "pen"}, "shop.Order.id is <five>"),
        ({"id": 5}, "shop.Order.item"),
        ({"id": 5, "item": "pen", "qty": "many"}, "shop.Order.qty"),
    ],
)
def test_avro_values_that_do_not_fit_name_the_field(value: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidPayload, match="does not match Avro schema subject 'orders'") as info:
        AvroSchema(ORDER_AVRO, subject="orders").encode(value)
    assert needle in str(info.value)


def test_avro_decode_refuses_truncated_and_trailing_bytes() -> None:
    schema = AvroSchema(ORDER_AVRO, subject="orders")
    payload = schema.encode({"id": 5, "item": "pen"})
    with pytest.raises(InvalidPayload, match="1 bytes left after the datum"):
        schema.decode(payload + b"\x00")
    with pytest.raises(InvalidPayload, match="does not decode"):
        schema.decode(payload[:3])


def test_avro_bad_definition() -> None:
    with pytest.raises(InvalidSchema, match="invalid Avro schema for subject 'x'"):
        AvroSchema({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}, subject="x")


# ---------------------------------------------------------------------------- Protobuf


def test_protobuf_descriptor_set_puts_the_class_first_with_its_imports() -> None:
    # api.proto imports source_context.proto and type.proto; Method is its second message.
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set_of(api_pb2.Method))
    names = [f.name for f in fds.file]
    assert names[-1] == "google/protobuf/api.proto"
    assert set(names[:-1]) >= {"google/protobuf/source_context.proto", "google/protobuf/type.proto"}
    assert [m.name for m in fds.file[-1].message_type][:2] == ["Method", "Api"]
    assert not fds.file[-1].HasField("source_code_info")
    compiled = compile_schema("protobuf", descriptor_set_of(api_pb2.Method))
    assert compiled.message_name == "google.protobuf.Method"  # type: ignore[attr-defined]
    # The file's own first message is kept first.
    assert compile_schema("protobuf", descriptor_set_of(api_pb2.Api)).message_name == "google.protobuf.Api"  # type: ignore[attr-defined]


def test_protobuf_round_trip_and_type_check() -> None:
    schema = ProtobufSchema(pb.StreamMessage, subject="stream")
    msg = pb.StreamMessage(payload=b"x", producer_name="p", schema_id=3)
    payload = schema.encode(msg)
    assert valid_for_registry(schema, payload) is None
    assert schema.decode(payload) == msg
    with pytest.raises(InvalidPayload, match=r"expected a danube\.StreamMessage"):
        schema.encode(timestamp_pb2.Timestamp(seconds=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidPayload, match="does not decode"):
        schema.decode(b"\xff\xff\xff")


def test_protobuf_nested_message_is_refused() -> None:
    with pytest.raises(InvalidSchema, match="nested message"):
        ProtobufSchema(descriptor_pb2.DescriptorProto.ExtensionRange, subject="x")


# ---------------------------------------------------------------------------- references, names


def test_schema_references() -> None:
    assert SchemaReference("s").describe() == "'s' (latest)"
    assert SchemaReference("s", version=2).describe() == "'s' version 2"
    for kwargs in ({"version": 1, "min_version": 1}, {"version": 0}, {"min_version": -1}):
        with pytest.raises(InvalidArgument):
            SchemaReference("s", **kwargs)
    with pytest.raises(InvalidArgument, match="register=False"):
        JsonSchema(Order, subject="orders", version=2)
    ref = JsonSchema(Order, subject="orders", register=False, min_version=2).reference
    assert ref == SchemaReference("orders", min_version=2)


def test_type_and_mode_names_match_the_registry_core() -> None:
    assert set(SCHEMA_TYPES) == {t.value for t in SchemaType}
    assert set(COMPATIBILITY_MODES) == {m.value for m in CompatibilityMode}
    assert schema_type_of("JSON") == "json_schema" and schema_type_of(SchemaType.AVRO) == "avro"
    assert compatibility_mode_of("Full_Transitive") == "full_transitive"
    with pytest.raises(InvalidSchema, match="expected one of bytes, string"):
        schema_type_of("yaml")
    with pytest.raises(InvalidSchema, match="unknown compatibility mode"):
        compatibility_mode_of("sideways")


def _info(schema_type: str, definition: bytes) -> SchemaInfo:
    return SchemaInfo(1, 1, "s", schema_type, definition, "sha256:x", "backward")


def test_generic_decoders_by_schema_type() -> None:
    avro = AvroSchema(ORDER_AVRO, subject="s")
    assert decoder_for(_info("avro", avro.definition()))(avro.encode({"id": 1, "item": "a"})) == {
        "id": 1,
        "item": "a",
        "qty": 1,
    }
    assert decoder_for(_info("json_schema", b"{}"))(b'{"a": [1]}') == {"a": [1]}
    proto = ProtobufSchema(api_pb2.Method, subject="s")
    as_dict = decoder_for(_info("protobuf", proto.definition()))(
        proto.encode(api_pb2.Method(name="m", request_streaming=True))
    )
    assert as_dict == {"name": "m", "request_streaming": True}
    assert decoder_for(_info("string", b""))("é".encode()) == "é"
    assert decoder_for(_info("bytes", b""))(b"\x00") == b"\x00"
    with pytest.raises(InvalidPayload, match="not the JSON of json_schema schema 's' version 1"):
        decoder_for(_info("json_schema", b"{}"))(b"{")


# ---------------------------------------------------------------------------- against the fake cluster


async def test_typed_producer_registers_pins_and_stamps(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    schema = JsonSchema(Order, subject="orders")
    consumer = await client.subscribe(T, subscription="s", schema=schema)
    producer = await client.create_producer(T, schema=schema)
    assert producer.schema is not None and producer.schema.version == 1
    await producer.send(Order(id=1, item="a"))
    await producer.send_many([Order(id=2, item="b"), Order(id=3, item="c")])
    sid = cluster.registry.subjects["orders"].schema_id
    create = cluster.calls_of("CreateProducer")[0]
    assert isinstance(create, pb.ProducerRequest)
    assert create.schema_ref.subject == "orders" and create.schema_ref.pinned_version == 1
    stored = cluster.topics[T].log
    assert [(m.schema_id, m.schema_version) for m in stored] == [(sid, 1)] * 3
    got: list[Message[Order]] = [await consumer.receive(timeout_s=5) for _ in range(3)]
    assert [m.value() for m in got] == [Order(id=1, item="a"), Order(id=2, item="b"), Order(id=3, item="c")]
    assert (got[0].schema_id, got[0].schema_version) == (sid, 1)
    # A second producer with the same definition gets the same version (no new one).
    again = await client.create_producer(T, schema=JsonSchema(Order, subject="orders"))
    assert again.schema == producer.schema and cluster.registry.subjects["orders"].next_version == 2


async def test_invalid_value_is_refused_before_anything_is_sent(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    producer = await client.create_producer(T, schema=AvroSchema(ORDER_AVRO, subject="orders"))
    with pytest.raises(InvalidPayload, match=r"shop\.Order\.id"):
        await producer.send({"id": "x", "item": "a"})
    assert producer.pending == 0 and not cluster.frames


async def test_schema_ref_producer_resolves_versions(client: DanubeClient, cluster: FakeCluster) -> None:
    schemas = client.schemas()
    v1 = await schemas.register("people", "json_schema", b'{"type": "object"}')
    v2 = await schemas.register("people", "json_schema", b'{"type": "object", "title": "P"}')
    assert (v1.version, v2.version, v2.is_new_version) == (1, 2, True)
    pinned = await client.create_producer(T, schema_ref=SchemaReference("people", version=1))
    assert pinned.schema is not None and (pinned.schema.schema_id, pinned.schema.version) == (v1.schema_id, 1)
    await pinned.send(b"{}")
    assert cluster.topics[T].log[-1].schema_version == 1
    latest = await client.create_producer(T, schema_ref=SchemaReference("people"))
    assert latest.schema is not None and latest.schema.version == 2
    at_least = await client.create_producer(T, schema_ref=SchemaReference("people", min_version=2))
    assert at_least.schema is not None and at_least.schema.version == 2
    with pytest.raises(NotFound, match="no version >= 3"):
        await client.create_producer(T, schema_ref=SchemaReference("people", min_version=3))
    with pytest.raises(NotFound, match="no version 9"):
        await client.create_producer(T, schema_ref=SchemaReference("people", version=9))
    with pytest.raises(NotFound, match="'nobody' does not exist"):
        await client.create_producer(T, schema_ref=SchemaReference("nobody"))
    with pytest.raises(InvalidSchema, match="holds json_schema schemas; AvroSchema encodes avro"):
        await client.create_producer(T, schema=AvroSchema(ORDER_AVRO, subject="people", register=False))
    with pytest.raises(InvalidArgument, match="not both"):
        await client.create_producer(  # type: ignore[call-overload]
            T, schema=JsonSchema(Order, subject="o"), schema_ref=SchemaReference("o")
        )


async def test_registry_decode_fetches_each_writer_schema_once(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s")  # no schema: bytes
    producer = await client.create_producer(T, schema=AvroSchema(ORDER_AVRO, subject="orders"))
    await producer.send_many([{"id": i, "item": "x"} for i in range(3)])
    await (await client.create_producer(T)).send(b"plain")
    schemas = client.schemas()
    values = [await schemas.decode(await consumer.receive(timeout_s=5)) for _ in range(4)]
    assert values == [{"id": i, "item": "x", "qty": 1} for i in range(3)] + [b"plain"]
    assert [name for name, _ in cluster.registry.calls].count("GetSchema") == 1


async def test_messages_without_schema_have_none(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    consumer = await client.subscribe(T, subscription="s")
    await (await client.create_producer(T)).send(b"raw")
    msg = await consumer.receive(timeout_s=5)
    assert (msg.schema_id, msg.schema_version, msg.value()) == (None, None, b"raw")
