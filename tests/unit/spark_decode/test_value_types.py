"""Schema-registry definitions mapped to Spark types, decoded values checked against them, and the
executor's payload decoder (pure: no Spark session, no registry)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from danube_common.errors import ConfigError
from danube_spark.decoding import DecodeSpec, PayloadDecoder, spark_type
from danube_spark.history_options import parse_options
from danube_spark.stream_options import SourceOptions
from danube_spark.value_types import ValueMismatch, avro_type, conform, json_schema_type

pytestmark = pytest.mark.unit

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "blob", "type": "bytes"},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "DONE"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["string", "null"]}],
            },
        },
        {"name": "bill", "type": ["null", "Address"], "default": None},  # a named type used again
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}

ADDRESS = StructType([StructField("city", StringType(), False), StructField("zip", StringType(), True)])


def test_avro_record_maps_every_supported_type() -> None:
    t = avro_type(json.dumps(ORDER_V1))
    assert [(f.name, f.dataType, f.nullable) for f in t.fields] == [
        ("id", LongType(), False),
        ("qty", IntegerType(), False),
        ("price", DoubleType(), False),
        ("ratio", FloatType(), False),
        ("paid", BooleanType(), False),
        ("note", StringType(), True),
        ("blob", BinaryType(), False),
        ("state", StringType(), False),
        ("digest", BinaryType(), False),
        ("ship", ADDRESS, False),
        ("bill", ADDRESS, True),
        ("tags", ArrayType(StringType(), False), False),
        ("counts", MapType(StringType(), LongType(), True), False),
        ("day", DateType(), False),
        ("at", TimestampType(), False),
        ("local", TimestampNTZType(), False),
        ("amount", DecimalType(10, 2), False),
        ("ref", StringType(), False),
    ]
    to_arrow_type(t, timezone="UTC")  # Arrow can carry it


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]},
            r"\$\.u.*union \[int, string\]",
        ),
        (
            {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
            r"\$\.next.*recursive record Node",
        ),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "t", "type": {"type": "int", "logicalType": "time-millis"}}],
            },
            r"\$\.t.*time-millis",
        ),
        ({"type": "array", "items": "int"}, "not a record"),
        ("string", "not a record"),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nope"}]}, "unknown type 'Nope'"),
    ],
)
def test_avro_shapes_without_a_spark_type_are_refused_saying_where(schema: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        avro_type(json.dumps(schema))


PERSON = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "age", "address"],
    "properties": {
        "name": {"type": "string", "format": "email"},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "vip": {"type": "boolean"},
        "nick": {"type": ["string", "null"]},
        "level": {"enum": ["gold", "silver"]},
        "address": {"$ref": "#/$defs/Address"},
        "previous": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "$defs": {
        "Address": {
            "type": "object",
            "required": ["city"],
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        }
    },
}
JSON_ADDRESS = StructType([StructField("city", StringType(), False), StructField("zip", StringType(), True)])


def test_json_schema_object_maps_its_properties() -> None:
    t = json_schema_type(json.dumps(PERSON))
    assert [(f.name, f.dataType, f.nullable) for f in t.fields] == [
        ("name", StringType(), False),
        ("age", LongType(), False),
        ("score", DoubleType(), True),
        ("vip", BooleanType(), True),
        ("nick", StringType(), True),
        ("level", StringType(), True),
        ("address", JSON_ADDRESS, False),
        ("previous", JSON_ADDRESS, True),
        ("tags", ArrayType(StringType(), False), True),
        ("extra", MapType(StringType(), LongType(), False), True),
    ]


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (obj(x={"type": ["string", "integer"]}), r"\$\.x.*types \['string', 'integer'\]"),
        (obj(x={"anyOf": [{"type": "string"}, {"type": "integer"}]}), r"\$\.x.*anyOf of 2 schemas"),
        (obj(x={"allOf": [{"type": "string"}]}), r"\$\.x.*'allOf'"),
        (obj(x={"type": "array"}), r"\$\.x.*array without one 'items'"),
        (obj(x={"type": "object"}), r"\$\.x.*object without properties"),
        (obj(x={"$ref": "https://example.com/s.json"}), r"\$\.x.*out of the document"),
        (
            {**obj(n={"$ref": "#/$defs/N"}), "$defs": {"N": obj(next={"$ref": "#/$defs/N"})}},
            "recursive reference",
        ),
        (obj(x={"$ref": "#/$defs/Missing"}), "does not point into the document"),
        ({"type": "string"}, "top level is not an object"),
        (obj(x={}), r"\$\.x.*without a type"),
    ],
)
def test_json_schema_shapes_without_a_spark_type_are_refused_saying_where(schema: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        json_schema_type(json.dumps(schema))


def test_other_schema_types_are_refused() -> None:
    with pytest.raises(ConfigError, match="holds protobuf schemas; only Avro and JSON Schema"):
        spark_type("protobuf", b"", subject="s")


def test_conform_checks_values_and_says_where_they_do_not_fit() -> None:
    t = json_schema_type(json.dumps(PERSON))
    ok = {"name": "a", "age": 3, "score": 1, "address": {"city": "x"}, "extra": {"k": 1}, "unknown": 1}
    got = conform(ok, t)
    assert got["score"] == 1.0 and isinstance(got["score"], float)
    assert got["extra"] == [("k", 1)] and got["tags"] is None and "unknown" not in got
    pa.array([got], type=to_arrow_type(t, timezone="UTC"))  # what Arrow builds the column from
    for bad, where in [
        ({**ok, "age": "3"}, r"\$\.age: expected bigint, got a string"),
        ({**ok, "age": True}, r"\$\.age: expected bigint, got a boolean"),
        ({**ok, "age": 2**63}, r"\$\.age: .* out of the 64-bit range"),
        ({**ok, "address": {"zip": "1"}}, r"\$\.address\.city: missing or null"),
        ({**ok, "tags": ["a", None]}, r"\$\.tags\[1\]: missing or null"),
        ({**ok, "name": None}, r"\$\.name: missing or null"),
        ([1], r"\$: expected an object, got an array"),
    ]:
        with pytest.raises(ValueMismatch, match=where):
            conform(bad, t)


def avro_bytes(schema: Any, value: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


ORDER_VALUE = {
    "id": 7,
    "qty": 2,
    "price": 1.5,
    "ratio": 0.5,
    "paid": True,
    "note": None,
    "blob": b"\x00\x01",
    "state": "DONE",
    "digest": b"abcd",
    "ship": {"city": "Oslo", "zip": None},
    "bill": {"city": "Bergen", "zip": "5003"},
    "tags": ["a", "b"],
    "counts": {"x": 1, "y": None},
    "day": dt.date(2026, 11, 27),
    "at": dt.datetime(2026, 11, 27, 12, 0, 0, 123000, tzinfo=dt.UTC),
    "local": dt.datetime(2026, 11, 27, 12, 0, 0, 5),
    "amount": decimal.Decimal("12.34"),
    "ref": "6f1c8b52-3a7e-4c1e-9d0a-2b5c7e8f9a10",
}

ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}],
}


def avro_spec() -> DecodeSpec:
    """Subject ``orders`` (id 5): version 1, and version 2 (a field added with a default) as the
    column's type."""
    return DecodeSpec(
        subject="orders",
        schema_type="avro",
        schema_id=5,
        version=2,
        value_type_json=avro_type(json.dumps(ORDER_V2)).json(),
        definitions=((1, json.dumps(ORDER_V1).encode()), (2, json.dumps(ORDER_V2).encode())),
    )


def test_avro_payloads_decode_with_their_writers_version_into_the_columns_type() -> None:
    spec = avro_spec()
    dec = PayloadDecoder(spec)
    v1 = avro_bytes(ORDER_V1, ORDER_VALUE)
    v2 = avro_bytes(ORDER_V2, {**ORDER_VALUE, "channel": "app"})
    dec.add(v1, 5, 1)  # written with version 1: resolved to version 2 (the default fills channel)
    dec.add(v2, 5, 2)
    dec.add(v2, None, None)  # no schema id: the column's version
    dec.add(v2[:-3], 5, 2)  # truncated
    dec.add(v2 + b"\x00", 5, 2)  # trailing bytes
    dec.add(v1, 9, 1)  # another subject's id
    dec.add(v1, 5, 3)  # a version registered after the read was planned
    field = pa.field("value", to_arrow_type(spec.value_type, timezone="UTC"))
    values, errors = dec.take(field, pa.field("decode_error", pa.string()))
    rows, errs = values.to_pylist(), errors.to_pylist()
    assert errs[:3] == [None, None, None]
    assert rows[0]["channel"] == "web" and rows[1]["channel"] == rows[2]["channel"] == "app"
    first = rows[0]
    assert first["counts"] == [("x", 1), ("y", None)]
    assert first["amount"] == decimal.Decimal("12.34") and first["day"] == dt.date(2026, 11, 27)
    assert first["at"] == ORDER_VALUE["at"] and first["bill"] == {"city": "Bergen", "zip": "5003"}
    assert first["ref"] == ORDER_VALUE["ref"] and first["digest"] == b"abcd"
    assert rows[3:] == [None] * 4
    assert errs[3].startswith("payload does not decode as avro version 2")
    assert "1 bytes left after the Avro datum" in errs[4]
    assert errs[5] == "schema id 9 is not that of subject 'orders' (5)"
    assert errs[6] == "version 3 of subject 'orders' was not registered when the read was planned"
    assert dec.take(field, pa.field("decode_error", pa.string()))[0].to_pylist() == []  # started afresh


def test_json_payloads_that_do_not_decode_or_fit_give_null_and_the_reason() -> None:
    t = json_schema_type(json.dumps(PERSON))
    spec = DecodeSpec("people", "json_schema", 3, 1, t.json(), ((1, json.dumps(PERSON).encode()),))
    dec = PayloadDecoder(spec)
    good = {"name": "a", "age": 30, "address": {"city": "Oslo"}, "tags": ["x"]}
    assert dec.decode(json.dumps(good).encode(), 3, 1)[0]["tags"] == ["x"]
    value, error = dec.decode(b"{not json", 3, 1)
    assert value is None and error is not None and error.startswith("payload does not decode as json_schema")
    value, error = dec.decode(json.dumps({**good, "age": "old"}).encode(), 3, 1)
    assert value is None and error == (
        "decoded value does not fit the value column (version 1): $.age: expected bigint, got a string"
    )


def test_decode_options() -> None:
    base = {"topic": "/default/t", "object_store.local_dir": "/tmp/x"}
    with pytest.raises(ConfigError, match="decode=true needs schema_registry_url"):
        parse_options({**base, "decode": "true"})
    with pytest.raises(ConfigError, match="need decode=true"):
        parse_options({**base, "schema_subject": "s"})
    got = parse_options(
        {**base, "decode": "true", "schema_registry_url": "http://r:1", "schema_version": "2"}
    )
    assert (got.decode, got.schema_registry_url, got.schema_subject, got.schema_version) == (
        True,
        "http://r:1",
        None,
        2,
    )
    url = {"service_url": "http://127.0.0.1:6650"}
    with pytest.raises(ConfigError, match="with a pattern needs schemaSubject"):
        SourceOptions.parse({**url, "pattern": "/default/a.*", "decode": "true"})
    with pytest.raises(ConfigError, match="need decode=true"):
        SourceOptions.parse({**url, "topics": "/default/a", "schemaVersion": "1"})
    got_s = SourceOptions.parse({**url, "topics": "/default/a", "decode": "true", "schemaSubject": "s"})
    assert (got_s.decode, got_s.schema_subject, got_s.schema_version) == (True, "s", None)
