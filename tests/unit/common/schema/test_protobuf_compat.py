"""Protobuf compatibility: wire-compatible field changes, required, oneof and reserved rules."""

from __future__ import annotations

import pytest

from ._defs import Row, assert_compat, descriptor_set, expand, proto2, proto3

pytestmark = pytest.mark.unit


def m(body: str) -> bytes:
    """``message Order`` (proto3) with ``body`` as its fields."""
    return proto3(f"message Order {{ {body} }}")


def m2(body: str) -> bytes:
    return proto2(f"message Order {{ {body} }}")


ITEM = "message Item { string sku = 1; int32 qty = 2; }"
ITEM_BAD = "message Item { string sku = 1; double qty = 2; }"

ROWS: list[Row] = [
    ("identical", m("string id = 1;"), m("string id = 1;"), None, None),
    ("add-field", m("string id = 1;"), m("string id = 1; int64 qty = 2;"), None, None),
    ("rename-field", m("string id = 1;"), m("string key = 1;"), None, None),
    (
        "remove-field-reserved",
        m("string id = 1; int64 qty = 2;"),
        m('string id = 1; reserved 2; reserved "qty";'),
        None,
        None,
    ),
    (
        "remove-field-unreserved",
        m("string id = 1; int64 qty = 2;"),
        m("string id = 1;"),
        "field 2 'qty' was removed without reserving its number",
        "field 2 'qty' was removed without reserving its name",
    ),
    (
        "remove-field-number-only",
        m("string id = 1; int64 qty = 2;"),
        m("string id = 1; reserved 2;"),
        "without reserving its name",
        "without reserving its name",
    ),
    (
        "reuse-reserved-number",
        m("string id = 1; reserved 2;"),
        m("string id = 1; bool gift = 2;"),
        "field 2 'gift' reuses a number reserved in the old schema",
        "reuses a number reserved",
    ),
    (
        "reuse-reserved-name",
        m('string id = 1; reserved "gift";'),
        m("string id = 1; bool gift = 3;"),
        "reuses a name reserved",
        "reuses a name reserved",
    ),
    ("int32-to-int64", m("int32 n = 1;"), m("int64 n = 1;"), None, None),
    ("uint64-to-bool", m("uint64 n = 1;"), m("bool n = 1;"), None, None),
    (
        "int32-to-sint32",
        m("int32 n = 1;"),
        m("sint32 n = 1;"),
        "type changed from int32 to sint32, which is not wire-compatible",
        "type changed from sint32 to int32",
    ),
    ("sint32-to-sint64", m("sint32 n = 1;"), m("sint64 n = 1;"), None, None),
    ("fixed32-to-sfixed32", m("fixed32 n = 1;"), m("sfixed32 n = 1;"), None, None),
    ("fixed64-to-sfixed64", m("fixed64 n = 1;"), m("sfixed64 n = 1;"), None, None),
    (
        "fixed32-to-fixed64",
        m("fixed32 n = 1;"),
        m("fixed64 n = 1;"),
        "type changed from fixed32 to fixed64",
        "type changed from fixed64 to fixed32",
    ),
    (
        "float-to-double",
        m("float n = 1;"),
        m("double n = 1;"),
        "type changed from float to double",
        "type changed from double to float",
    ),
    (
        "int64-to-string",
        m("int64 n = 1;"),
        m("string n = 1;"),
        "type changed from int64 to string",
        "type changed from string to int64",
    ),
    ("string-to-bytes", m("string s = 1;"), m("bytes s = 1;"), None, "type changed from bytes to string"),
    ("bytes-to-string", m("bytes s = 1;"), m("string s = 1;"), "type changed from bytes to string", None),
    (
        "message-to-bytes",
        proto3("message Order { Item item = 1; } " + ITEM),
        proto3("message Order { bytes item = 1; } " + ITEM),
        None,
        "type changed from bytes to message shop.Item",
    ),
    ("enum-to-int32", proto3("enum S { S0 = 0; } message Order { S s = 1; }"), m("int32 s = 1;"), None, None),
    (
        "message-type-renamed",
        proto3("message Order { Item item = 1; } " + ITEM),
        proto3("message Order { Line item = 1; } " + ITEM.replace("Item", "Line")),
        None,
        None,
    ),
    (
        "nested-message-field-changed",
        proto3("message Order { Item item = 1; } " + ITEM),
        proto3("message Order { Item item = 1; } " + ITEM_BAD),
        "shop.Item field 2 'qty': type changed from int32 to double",
        "type changed from double to int32",
    ),
    (
        "singular-to-repeated",
        m("string tag = 1;"),
        m("repeated string tag = 1;"),
        "changed from singular to repeated",
        "changed from repeated to singular",
    ),
    (
        "map-value-changed",
        m("map<string, int32> m = 1;"),
        m("map<string, string> m = 1;"),
        "field 2 'value': type changed from int32 to string",
        "type changed from string to int32",
    ),
    (
        "proto2-add-required",
        m2("optional string id = 1;"),
        m2("optional string id = 1; required int32 n = 2;"),
        "required field 2 'n' is absent from the writer's schema",
        None,
    ),
    (
        "proto2-required-to-optional",
        m2("required int32 n = 1;"),
        m2("optional int32 n = 1;"),
        None,
        "required field 1 'n' is optional in the writer's schema",
    ),
    (
        "proto2-closed-enum-value-added",
        proto2("enum S { A = 0; B = 1; } message Order { optional S s = 1; }"),
        proto2("enum S { A = 0; B = 1; C = 2; } message Order { optional S s = 1; }"),
        None,
        "closed enum shop.S lacks values [2]",
    ),
    (
        "proto3-open-enum-value-added",
        proto3("enum S { A = 0; B = 1; } message Order { S s = 1; }"),
        proto3("enum S { A = 0; B = 1; C = 2; } message Order { S s = 1; }"),
        None,
        None,
    ),
    (
        "fields-moved-into-oneof",
        m("string a = 1; string b = 2;"),
        m("oneof pick { string a = 1; string b = 2; }"),
        "fields 1 and 2 share oneof 'pick' in the reader but not in the writer",
        None,
    ),
    (
        "single-field-into-new-oneof",
        m("string a = 1; string b = 2;"),
        m("string a = 1; oneof pick { string b = 2; }"),
        None,
        None,
    ),
    (
        "field-added-to-oneof",
        m("oneof pick { string a = 1; }"),
        m("oneof pick { string a = 1; string b = 2; }"),
        None,
        None,
    ),
    (
        "field-moved-between-oneofs",
        m("oneof p { string a = 1; string b = 2; } oneof q { string c = 3; }"),
        m("oneof p { string a = 1; } oneof q { string b = 2; string c = 3; }"),
        "fields 2 and 3 share oneof 'q'",
        "fields 1 and 2 share oneof 'p'",
    ),
    ("fds-vs-text-identical", m("string id = 1;"), descriptor_set(m("string id = 1;")), None, None),
]


@pytest.mark.parametrize(("old", "new", "mode", "expect"), expand(ROWS))
def test_protobuf_compatibility(old: bytes, new: bytes, mode: str, expect: list[tuple[str, str]]) -> None:
    assert_compat("protobuf", old, new, mode, expect)
