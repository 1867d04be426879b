"""Avro compatibility by the schema resolution rules, in each direction and mode."""

from __future__ import annotations

from typing import Any

import pytest

from ._defs import Row, assert_compat, expand, field, js, record

pytestmark = pytest.mark.unit


def rec(*fields: dict[str, Any], name: str = "User", **extra: Any) -> bytes:
    return js(record(name, *fields, namespace="ex", **extra))


ID = field("id", "long")
COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
COLOR3 = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
NODE = record("Node", field("value", "int"), field("next", ["null", "Node"], default=None))

ROWS: list[Row] = [
    ("identical", rec(ID), rec(ID), None, None),
    ("add-field-with-default", rec(ID), rec(ID, field("email", "string", default="")), None, None),
    (
        "add-field-without-default",
        rec(ID),
        rec(ID, field("email", "string")),
        "field 'email' has no default",
        None,
    ),
    ("remove-field-with-default", rec(ID, field("email", "string", default="")), rec(ID), None, None),
    (
        "remove-field-without-default",
        rec(ID, field("email", "string")),
        rec(ID),
        None,
        "field 'email' has no default",
    ),
    (
        "int-to-long",
        rec(field("n", "int")),
        rec(field("n", "long")),
        None,
        "type changed: the writer writes long, the reader expects int",
    ),
    ("int-to-double", rec(field("n", "int")), rec(field("n", "double")), None, "the writer writes double"),
    ("long-to-float", rec(field("n", "long")), rec(field("n", "float")), None, "the writer writes float"),
    (
        "float-to-double",
        rec(field("n", "float")),
        rec(field("n", "double")),
        None,
        "the writer writes double",
    ),
    (
        "double-to-int",
        rec(field("n", "double")),
        rec(field("n", "int")),
        "the writer writes double, the reader expects int",
        None,
    ),
    ("long-to-int", rec(field("n", "long")), rec(field("n", "int")), "the writer writes long", None),
    ("string-to-bytes", rec(field("s", "string")), rec(field("s", "bytes")), None, None),
    ("string-to-int", rec(field("s", "string")), rec(field("s", "int")), "type changed", "type changed"),
    (
        "boolean-to-int",
        rec(field("b", "boolean")),
        rec(field("b", "int")),
        "writer writes boolean",
        "writer writes int",
    ),
    (
        "enum-add-symbol",
        rec(field("c", COLOR)),
        rec(field("c", COLOR3)),
        None,
        "enum symbols ['BLUE'] are unknown to the reader",
    ),
    (
        "enum-remove-symbol",
        rec(field("c", COLOR3)),
        rec(field("c", COLOR)),
        "enum symbols ['BLUE'] are unknown to the reader",
        None,
    ),
    (
        "enum-add-symbol-reader-default",
        rec(field("c", {**COLOR, "default": "RED"})),
        rec(field("c", {**COLOR3, "default": "RED"})),
        None,
        None,
    ),
    (
        "enum-renamed",
        rec(field("c", COLOR)),
        rec(field("c", {**COLOR, "name": "Colour"})),
        "enum name changed",
        "enum name changed",
    ),
    (
        "record-renamed",
        rec(ID),
        rec(ID, name="Person"),
        "record name changed from 'ex.User' to 'ex.Person'",
        "record name changed",
    ),
    (
        "record-renamed-with-alias",
        rec(ID),
        rec(ID, name="Person", aliases=["User"]),
        None,
        "record name changed",
    ),
    (
        "record-namespace-moved",
        js(record("User", ID, namespace="a")),
        js(record("User", ID, namespace="b")),
        None,
        None,
    ),
    (
        "field-renamed-with-alias",
        rec(field("a", "int")),
        rec(field("b", "int", aliases=["a"])),
        None,
        "field 'a' has no default",
    ),
    (
        "fixed-size",
        rec(field("f", {"type": "fixed", "name": "F", "size": 4})),
        rec(field("f", {"type": "fixed", "name": "F", "size": 8})),
        "fixed size changed from 4 to 8",
        "fixed size changed from 8 to 4",
    ),
    (
        "array-items-promoted",
        rec(field("xs", {"type": "array", "items": "int"})),
        rec(field("xs", {"type": "array", "items": "long"})),
        None,
        "at /User.xs[]: type changed",
    ),
    (
        "map-values-changed",
        rec(field("m", {"type": "map", "values": "string"})),
        rec(field("m", {"type": "map", "values": "int"})),
        "at /User.m{}: type changed",
        "at /User.m{}: type changed",
    ),
    (
        "array-to-map",
        rec(field("x", {"type": "array", "items": "int"})),
        rec(field("x", {"type": "map", "values": "int"})),
        "the writer writes array, the reader expects map",
        "the writer writes map",
    ),
    (
        "union-branch-added",
        rec(field("u", ["null", "string"])),
        rec(field("u", ["null", "string", "int"])),
        None,
        "the reader's union has no branch for the writer's int",
    ),
    (
        "union-branch-removed",
        rec(field("u", ["null", "string", "int"])),
        rec(field("u", ["null", "string"])),
        "the reader's union has no branch for the writer's int",
        None,
    ),
    (
        "made-nullable",
        rec(field("s", "string")),
        rec(field("s", ["null", "string"], default=None)),
        None,
        "the writer writes null",
    ),
    (
        "union-branch-promoted",
        rec(field("u", ["null", "int"])),
        rec(field("u", ["null", "long"])),
        None,
        "the reader's union has no branch for the writer's long",
    ),
    (
        "nested-record-field",
        rec(field("addr", record("Addr", field("zip", "int")))),
        rec(field("addr", record("Addr", field("zip", "string")))),
        "at /User.addr/Addr.zip: type changed",
        "at /User.addr/Addr.zip",
    ),
    (
        "recursive-add-default",
        js(NODE),
        js({**NODE, "fields": [*NODE["fields"], field("w", "int", default=0)]}),
        None,
        None,
    ),
    (
        "recursive-add-no-default",
        js(NODE),
        js({**NODE, "fields": [*NODE["fields"], field("w", "int")]}),
        "field 'w' has no default",
        None,
    ),
    (
        "logical-type-added",
        rec(field("d", "int")),
        rec(field("d", {"type": "int", "logicalType": "date"})),
        None,
        None,
    ),
    (
        "top-level-primitive",
        js("string"),
        js("int"),
        "the writer writes string, the reader expects int",
        "the writer writes int",
    ),
    ("top-level-union", js(["null", "string"]), js("string"), "the reader expects string", None),
]


@pytest.mark.parametrize(("old", "new", "mode", "expect"), expand(ROWS))
def test_avro_compatibility(old: bytes, new: bytes, mode: str, expect: list[tuple[str, str]]) -> None:
    assert_compat("avro", old, new, mode, expect)
