"""Definitions at registration: invalid ones are refused saying what is wrong; canonical forms
and fingerprints make equivalent definitions dedup and different ones not."""

from __future__ import annotations

import hashlib
import re

import pytest
from google.protobuf import descriptor_pb2

from danube_common.errors import InvalidSchema
from danube_common.schema import SchemaType, compile_schema

from ._defs import descriptor_set, field, js, proto3, record

pytestmark = pytest.mark.unit

OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
USER = record("User", field("id", "long"), field("name", "string", default=""))
ORDER = "message Order { string id = 1; int64 qty = 2; }\nmessage Item { string sku = 1; }"

INVALID = [
    # (id, type, definition, message_name, expected message fragment)
    (
        "json-syntax",
        "json_schema",
        b'{"type": ',
        None,
        "not valid JSON (Expecting value at line 1 column 10)",
    ),
    ("json-not-utf8", "json_schema", b"\xff\xfe", None, "not UTF-8 text"),
    (
        "json-top-level",
        "json_schema",
        b"[1, 2]",
        None,
        "the top level must be an object or a boolean, not list",
    ),
    ("json-bad-type", "json_schema", js({"type": "objekt"}), None, "at 'type': 'objekt' is not valid"),
    (
        "json-bad-keyword",
        "json_schema",
        js({"properties": {"a": {"minimum": "x"}}}),
        None,
        "at 'properties/a/minimum': 'x' is not of type 'number'",
    ),
    ("json-dialect", "json_schema", js({"$schema": "http://example.com/s"}), None, "unsupported $schema"),
    (
        "json-draft7-rules",
        "json_schema",
        js({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": "a"}),
        None,
        "at 'required': 'a' is not of type 'array'",
    ),
    ("avro-syntax", "avro", b"{nope", None, "invalid Avro schema definition: not valid JSON"),
    ("avro-scalar", "avro", b"42", None, "expected a JSON object, array (union) or string"),
    ("avro-no-type", "avro", js({"name": "X"}), None, "a schema object needs a 'type'"),
    ("avro-unknown-type", "avro", js(record("R", field("a", "nope"))), None, "unknown type nope"),
    (
        "avro-no-fields",
        "avro",
        js({"type": "record", "name": "R"}),
        None,
        "record 'R' needs a 'fields' array",
    ),
    (
        "avro-dup-field",
        "avro",
        js(record("R", field("a", "int"), field("a", "long"))),
        None,
        "two fields named 'a'",
    ),
    ("avro-bad-name", "avro", js(record("1R")), None, "name '1R' is not a valid Avro name"),
    (
        "avro-bad-default",
        "avro",
        js(record("R", field("a", "int", default="x"))),
        None,
        "Default value <x> must match schema type: int",
    ),
    (
        "avro-dup-symbol",
        "avro",
        js({"type": "enum", "name": "E", "symbols": ["A", "A"]}),
        None,
        "symbols in an enum must be unique",
    ),
    (
        "avro-bad-symbol",
        "avro",
        js({"type": "enum", "name": "E", "symbols": ["a-b"]}),
        None,
        "needs 'symbols'",
    ),
    ("avro-fixed-size", "avro", js({"type": "fixed", "name": "F"}), None, "fixed 'F' needs a 'size'"),
    ("avro-array-items", "avro", js({"type": "array"}), None, "an array needs 'items'"),
    ("avro-map-values", "avro", js({"type": "map"}), None, "a map needs 'values'"),
    ("avro-nested-union", "avro", js(["null", ["int"]]), None, "may not directly contain another union"),
    (
        "proto-undefined",
        "protobuf",
        proto3("message A { Strin s = 1; }"),
        None,
        'line 3:13: "Strin" is not defined',
    ),
    (
        "proto-dup-number",
        "protobuf",
        proto3("message A { int32 a = 1; int32 b = 1; }"),
        None,
        "Field number 1 has already been used",
    ),
    ("proto-syntax", "protobuf", proto3("message A { int32 a = ; }"), None, "line 3:"),
    ("proto-import", "protobuf", proto3('import "other.proto";\nmessage A {}'), None, "other.proto"),
    (
        "proto-no-message",
        "protobuf",
        proto3("enum E { E0 = 0; }"),
        None,
        "the main file 'schema.proto' defines no message",
    ),
    (
        "proto-unknown-name",
        "protobuf",
        proto3(ORDER),
        "shop.Nope",
        "no message 'shop.Nope'; the main file defines",
    ),
    (
        "proto-binary-junk",
        "protobuf",
        b"\xff\x00\xfe",
        None,
        "neither a serialized FileDescriptorSet nor UTF-8",
    ),
]


@pytest.mark.parametrize(
    ("type_", "definition", "message", "fragment"), [r[1:] for r in INVALID], ids=[r[0] for r in INVALID]
)
def test_invalid_definitions_say_what_is_wrong(
    type_: str, definition: bytes, message: str | None, fragment: str
) -> None:
    with pytest.raises(InvalidSchema) as info:
        compile_schema(type_, definition, message_name=message)
    assert fragment in info.value.message


def test_descriptor_set_without_its_import_is_refused() -> None:
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set(proto3("message A { int32 a = 1; }")))
    fds.file[-1].dependency.append("company/dep.proto")
    with pytest.raises(InvalidSchema, match=r"lacks 'company/dep\.proto'.*--include_imports"):
        compile_schema("protobuf", fds.SerializeToString())


def test_descriptor_set_may_omit_well_known_types() -> None:
    text = proto3(
        'import "google/protobuf/timestamp.proto";\nmessage A { google.protobuf.Timestamp at = 1; }'
    )
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set(text))
    assert [f.name for f in fds.file] == ["google/protobuf/timestamp.proto", "schema.proto"]
    del fds.file[0]
    schema = compile_schema("protobuf", fds.SerializeToString())
    assert schema.fingerprint == compile_schema("protobuf", text).fingerprint


SAME = [
    # (id, type, a, b, message_name_a, message_name_b)
    (
        "json-layout",
        "json_schema",
        js(OBJ),
        b'{ "required": ["a"],\n  "type": "object",\n "properties": {"a": {"type": "integer"}} }',
        None,
        None,
    ),
    (
        "avro-key-order",
        "avro",
        js(USER),
        b'{"fields": [{"type": "long", "name": "id"}, {"default": "", "type": "string", "name": "name"}], "name": "User", "type": "record"}',
        None,
        None,
    ),
    (
        "proto-comments",
        "protobuf",
        proto3(ORDER),
        proto3(
            "// orders\nmessage  Order {\n  string id = 1; // key\n  int64 qty = 2;\n}\nmessage Item { string sku = 1; }"
        ),
        None,
        None,
    ),
    ("proto-text-vs-fds", "protobuf", proto3(ORDER), descriptor_set(proto3(ORDER)), None, None),
    ("proto-default-message", "protobuf", proto3(ORDER), proto3(ORDER), None, "shop.Order"),
    ("bytes-any-definition", "bytes", b"", b"whatever", None, None),
    ("number-any-definition", "number", b"", b'{"type": "int"}', None, None),
]

DIFFERENT = [
    ("json-changed", "json_schema", js(OBJ), js({**OBJ, "required": []}), None, None),
    (
        "avro-default",
        "avro",
        js(USER),
        js(record("User", field("id", "long"), field("name", "string", default="x"))),
        None,
        None,
    ),
    (
        "avro-field-order",
        "avro",
        js(USER),
        js(record("User", field("name", "string", default=""), field("id", "long"))),
        None,
        None,
    ),
    ("proto-message-choice", "protobuf", proto3(ORDER), proto3(ORDER), None, "shop.Item"),
    (
        "proto-field-number",
        "protobuf",
        proto3(ORDER),
        proto3(ORDER.replace("qty = 2", "qty = 3")),
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("type_", "a", "b", "msg_a", "msg_b"), [r[1:] for r in SAME], ids=[r[0] for r in SAME]
)
def test_equivalent_definitions_share_a_fingerprint(
    type_: str, a: bytes, b: bytes, msg_a: str | None, msg_b: str | None
) -> None:
    sa = compile_schema(type_, a, message_name=msg_a)
    sb = compile_schema(type_, b, message_name=msg_b)
    assert sa.canonical == sb.canonical
    assert sa.fingerprint == sb.fingerprint


@pytest.mark.parametrize(
    ("type_", "a", "b", "msg_a", "msg_b"), [r[1:] for r in DIFFERENT], ids=[r[0] for r in DIFFERENT]
)
def test_different_definitions_have_different_fingerprints(
    type_: str, a: bytes, b: bytes, msg_a: str | None, msg_b: str | None
) -> None:
    assert (
        compile_schema(type_, a, message_name=msg_a).fingerprint
        != compile_schema(type_, b, message_name=msg_b).fingerprint
    )


@pytest.mark.parametrize("type_", list(SchemaType))
def test_fingerprint_is_sha256_of_the_canonical_form(type_: SchemaType) -> None:
    definition = {
        SchemaType.JSON_SCHEMA: js(OBJ),
        SchemaType.AVRO: js(USER),
        SchemaType.PROTOBUF: proto3(ORDER),
    }.get(type_, b"")
    schema = compile_schema(type_, definition)
    assert schema.schema_type is type_
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", schema.fingerprint)
    assert schema.fingerprint == "sha256:" + hashlib.sha256(schema.canonical).hexdigest()


def test_primitive_types_do_not_share_a_fingerprint() -> None:
    prints = {compile_schema(t, b"").fingerprint for t in ("bytes", "string", "number")}
    assert len(prints) == 3
