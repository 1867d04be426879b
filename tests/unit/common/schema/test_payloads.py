"""Payload validation for every schema type, the batch API, and the compiled-schema cache."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import pytest

from danube_common.schema import (
    CompileCache,
    CompiledSchema,
    PayloadError,
    ProtobufSchema,
    compile_schema,
    validate_batch,
)

from ._defs import field, js, proto2, proto3, record

pytestmark = pytest.mark.unit

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name"],
    "additionalProperties": False,
}
EVENT = record(
    "Event",
    field("id", "long"),
    field("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}),
    field("note", ["null", "string"], default=None),
    namespace="ex",
)
ORDER = proto3("message Order { string id = 1; int64 qty = 2; repeated string tags = 3; }")
LEGACY = proto2("message Legacy { required int32 id = 1; optional string note = 2; }")


def avro_bytes(value: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(EVENT), value)
    return buf.getvalue()


def proto_bytes(schema: CompiledSchema, **values: Any) -> bytes:
    assert isinstance(schema, ProtobufSchema)
    cls: Any = schema._cls
    return bytes(cls(**values).SerializeToString())


_ORDER = compile_schema("protobuf", ORDER)
_LEGACY = compile_schema("protobuf", LEGACY)
GOOD_EVENT = avro_bytes({"id": 7, "kind": "B", "note": "hi"})

CASES = [
    # (id, type, definition, payload, None when valid else a fragment of the reason)
    ("bytes-empty", "bytes", b"", b"", None),
    ("bytes-binary", "bytes", b"", b"\x00\xff\xfe", None),
    ("string-utf8", "string", b"", "héllo ✓".encode(), None),
    ("string-empty", "string", b"", b"", None),
    ("string-bad-utf8", "string", b"", b"ab\xff", "not valid UTF-8: byte 0xff at offset 2"),
    ("number-int", "number", b"", struct.pack(">i", -5), None),
    ("number-double", "number", b"", struct.pack(">d", 1.5), None),
    (
        "number-3-bytes",
        "number",
        b"",
        b"\x00\x00\x01",
        "must be 4 bytes (int, float) or 8 bytes (long, double), got 3",
    ),
    ("number-empty", "number", b"", b"", "got 0 bytes"),
    ("number-16-bytes", "number", b"", bytes(16), "got 16 bytes"),
    ("json-valid", "json_schema", js(PERSON), b'{"name": "ann", "age": 3}', None),
    (
        "json-missing-required",
        "json_schema",
        js(PERSON),
        b'{"age": 3}',
        "at $: 'name' is a required property",
    ),
    (
        "json-wrong-type",
        "json_schema",
        js(PERSON),
        b'{"name": "ann", "age": "3"}',
        "at $.age: '3' is not of type 'integer'",
    ),
    (
        "json-below-minimum",
        "json_schema",
        js(PERSON),
        b'{"name": "a", "age": -1}',
        "at $.age: -1 is less than the minimum of 0",
    ),
    (
        "json-extra-property",
        "json_schema",
        js(PERSON),
        b'{"name": "a", "x": 1}',
        "Additional properties are not allowed",
    ),
    ("json-not-json", "json_schema", js(PERSON), b'{"name": ', "not valid JSON"),
    ("json-nan", "json_schema", js({"type": "number"}), b"NaN", "NaN is not valid JSON"),
    ("json-not-utf8", "json_schema", js(PERSON), b'"\xff"', "not UTF-8 JSON"),
    ("json-true-schema", "json_schema", b"true", b"[1, null]", None),
    ("avro-valid", "avro", js(EVENT), GOOD_EVENT, None),
    ("avro-null-branch", "avro", js(EVENT), avro_bytes({"id": -1, "kind": "A", "note": None}), None),
    ("avro-truncated", "avro", js(EVENT), GOOD_EVENT[:-2], "the payload ends early"),
    ("avro-trailing", "avro", js(EVENT), GOOD_EVENT + b"\x00", "1 trailing bytes after offset"),
    ("avro-bad-enum-index", "avro", js(EVENT), b"\x0e\x08\x00", "not a valid Avro datum"),
    ("avro-bad-union-index", "avro", js(EVENT), b"\x0e\x02\x08", "not a valid Avro datum"),
    ("avro-json-text", "avro", js(EVENT), json.dumps({"id": 7, "kind": "B", "note": None}).encode(), "Avro"),
    ("proto-valid", "protobuf", ORDER, proto_bytes(_ORDER, id="o1", qty=3, tags=["a", "b"]), None),
    ("proto-empty", "protobuf", ORDER, b"", None),
    ("proto-unknown-field", "protobuf", ORDER, b"\x48\x01", None),
    ("proto-corrupt", "protobuf", ORDER, b"\x0a\x05ab", "not a valid shop.Order message"),
    ("proto-bad-utf8", "protobuf", ORDER, b"\x0a\x02\xff\xfe", "not a valid shop.Order message"),
    ("proto2-required-set", "protobuf", LEGACY, proto_bytes(_LEGACY, id=4), None),
    (
        "proto2-required-missing",
        "protobuf",
        LEGACY,
        b"\x12\x01x",
        "shop.Legacy is missing required fields: id",
    ),
]


@pytest.mark.parametrize(
    ("type_", "definition", "payload", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_payload_validation(type_: str, definition: bytes, payload: bytes, fragment: str | None) -> None:
    reason = compile_schema(type_, definition).validate(payload)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None
        assert fragment in reason


def test_protobuf_message_can_be_chosen() -> None:
    text = proto2("message A { required string s = 1; }\nmessage B { optional int64 n = 2; }")
    by_default = compile_schema("protobuf", text)
    chosen = compile_schema("protobuf", text, message_name="shop.B")
    assert isinstance(by_default, ProtobufSchema) and isinstance(chosen, ProtobufSchema)
    assert (by_default.message_name, chosen.message_name) == ("shop.A", "shop.B")
    assert chosen.validate(b"") is None
    assert by_default.validate(b"") == "shop.A is missing required fields: s"


BATCH = [b'{"name": "a"}', b'{"age": 1}', b'{"name": "b", "age": 2}', b"not json", b'{"name": "c"}']


def test_batch_reports_each_invalid_payload_by_index() -> None:
    schema = compile_schema("json_schema", js(PERSON))
    errors = validate_batch(schema, BATCH)
    assert [e.index for e in errors] == [1, 3]
    assert "'name' is a required property" in errors[0].reason
    assert "not valid JSON" in errors[1].reason


def test_batch_first_only_stops_at_the_first_invalid_payload() -> None:
    schema = compile_schema("json_schema", js(PERSON))
    assert validate_batch(schema, BATCH, first_only=True) == [
        PayloadError(1, validate_batch(schema, [BATCH[1]])[0].reason)
    ]


def test_batch_of_valid_payloads_is_clean() -> None:
    schema = compile_schema("avro", js(EVENT))
    assert validate_batch(schema, [GOOD_EVENT] * 50) == []
    assert validate_batch(schema, []) == []


def test_cache_compiles_once_and_finds_by_fingerprint() -> None:
    cache = CompileCache(max_entries=2)
    a = cache.compile("json_schema", js(PERSON))
    assert cache.compile("json", js(PERSON)) is a
    assert cache.by_fingerprint(a.fingerprint) is a
    b = cache.compile("avro", js(EVENT))
    cache.compile("json_schema", js(PERSON))  # a is now the most recently used
    c = cache.compile("string", b"")
    assert len(cache) == 2
    assert cache.by_fingerprint(b.fingerprint) is None  # evicted, least recently used
    assert cache.by_fingerprint(a.fingerprint) is a
    assert cache.by_fingerprint(c.fingerprint) is c


def test_cache_refuses_no_room() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        CompileCache(max_entries=0)
