"""JSON Schema compatibility: every rule, in each direction, under none/backward/forward/full."""

from __future__ import annotations

from typing import Any

import pytest

from ._defs import Row, assert_compat, expand, js

pytestmark = pytest.mark.unit


def obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> bytes:
    return js({"type": "object", "properties": props, "required": required or [], **extra})


S, INT, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}
DEFS = {"$defs": {"addr": {"type": "object", "properties": {"zip": S}}}}
DEFS_INT = {"$defs": {"addr": {"type": "object", "properties": {"zip": INT}}}}

ROWS: list[Row] = [
    ("identical", obj({"a": S}, ["a"]), obj({"a": S}, ["a"]), None, None),
    (
        "only-annotations-change",
        obj({"a": S}),
        obj({"a": {**S, "description": "x", "format": "email"}}, title="T"),
        None,
        None,
    ),
    ("add-optional-property", obj({"a": S}), obj({"a": S, "b": INT}), None, None),
    (
        "add-required-property",
        obj({"a": S}),
        obj({"a": S, "b": INT}, ["b"]),
        "property 'b' is required by the reader but the writer does not define it",
        None,
    ),
    ("remove-optional-property", obj({"a": S, "b": INT}), obj({"a": S}), None, None),
    (
        "remove-required-property",
        obj({"a": S, "b": INT}, ["b"]),
        obj({"a": S}),
        None,
        "property 'b' is required by the reader but the writer does not define it",
    ),
    (
        "make-optional-required",
        obj({"a": S}),
        obj({"a": S}, ["a"]),
        "property 'a' is required by the reader but optional in the writer",
        None,
    ),
    (
        "remove-property-closed",
        obj({"a": S, "b": INT}, additionalProperties=False),
        obj({"a": S}, additionalProperties=False),
        "property 'b' of the writer is not allowed by the reader",
        None,
    ),
    (
        "add-property-closed",
        obj({"a": S}, additionalProperties=False),
        obj({"a": S, "b": INT}, additionalProperties=False),
        None,
        "property 'b' of the writer is not allowed by the reader",
    ),
    (
        "close-additional",
        obj({"a": S}),
        obj({"a": S}, additionalProperties=False),
        "additionalProperties closed",
        None,
    ),
    (
        "additional-schema-narrowed",
        obj({}, additionalProperties=N),
        obj({}, additionalProperties=INT),
        "at #/additionalProperties: type changed",
        None,
    ),
    (
        "removed-property-vs-additional-schema",
        obj({"a": S}, additionalProperties=S),
        obj({}, additionalProperties=INT),
        "at #/additionalProperties: type changed: the writer may write 'string'",
        "at #/properties/a: type changed: the writer may write 'integer'",
    ),
    (
        "type-change",
        obj({"a": S}),
        obj({"a": INT}),
        "at #/properties/a: type changed: the writer may write 'string'",
        "at #/properties/a: type changed: the writer may write 'integer'",
    ),
    ("integer-to-number", obj({"a": INT}), obj({"a": N}), None, "the writer may write 'number'"),
    (
        "type-union-widened",
        obj({"a": S}),
        obj({"a": {"type": ["string", "null"]}}),
        None,
        "the writer may write 'null'",
    ),
    (
        "type-added-where-none",
        obj({"a": {}}),
        obj({"a": S}),
        "type narrowed: the reader accepts only ['string']",
        None,
    ),
    (
        "enum-narrowed",
        obj({"a": {"enum": ["x", "y", "z"]}}),
        obj({"a": {"enum": ["x", "y"]}}),
        'the reader rejects values the writer allows: ["z"]',
        None,
    ),
    (
        "enum-added-where-none",
        obj({"a": S}),
        obj({"a": {"type": "string", "enum": ["x"]}}),
        "enum narrowed: the reader accepts only",
        None,
    ),
    (
        "const-changed",
        obj({"a": {"const": 1}}),
        obj({"a": {"const": 2}}),
        "the reader rejects values the writer allows: [1]",
        "[2]",
    ),
    (
        "max-length-lowered",
        obj({"a": {**S, "maxLength": 10}}),
        obj({"a": {**S, "maxLength": 5}}),
        "maxLength lowered",
        None,
    ),
    ("min-length-added", obj({"a": S}), obj({"a": {**S, "minLength": 1}}), "minLength raised", None),
    (
        "minimum-raised",
        obj({"a": {**INT, "minimum": 0}}),
        obj({"a": {**INT, "minimum": 10}}),
        "minimum raised",
        None,
    ),
    (
        "maximum-made-exclusive",
        obj({"a": {**N, "maximum": 5}}),
        obj({"a": {**N, "exclusiveMaximum": 5}}),
        "maximum lowered",
        None,
    ),
    ("maximum-added", obj({"a": N}), obj({"a": {**N, "maximum": 5}}), "maximum added", None),
    (
        "multiple-of-stricter",
        obj({"a": {**INT, "multipleOf": 2}}),
        obj({"a": {**INT, "multipleOf": 4}}),
        "multipleOf 4 added or changed",
        None,
    ),
    (
        "pattern-added",
        obj({"a": S}),
        obj({"a": {**S, "pattern": "^[a-z]+$"}}),
        "pattern added or changed",
        None,
    ),
    (
        "array-items-type",
        obj({"a": {"type": "array", "items": S}}),
        obj({"a": {"type": "array", "items": INT}}),
        "at #/properties/a/items: type changed",
        "at #/properties/a/items: type changed",
    ),
    (
        "array-min-items",
        obj({"a": {"type": "array"}}),
        obj({"a": {"type": "array", "minItems": 1}}),
        "minItems raised",
        None,
    ),
    (
        "unique-items-added",
        obj({"a": {"type": "array"}}),
        obj({"a": {"type": "array", "uniqueItems": True}}),
        "uniqueItems added",
        None,
    ),
    (
        "nested-ref",
        js({**DEFS, "type": "object", "properties": {"addr": {"$ref": "#/$defs/addr"}}}),
        js({**DEFS_INT, "type": "object", "properties": {"addr": {"$ref": "#/$defs/addr"}}}),
        "at #/properties/addr/properties/zip: type changed",
        "at #/properties/addr/properties/zip: type changed",
    ),
    ("writer-any-of-narrowed", js({"anyOf": [S, INT]}), js(S), "at #/anyOf/1: type changed", None),
    ("reader-any-of-covers", js(S), js({"anyOf": [S, INT]}), None, "at #/anyOf/1: type changed"),
    (
        "reader-any-of-misses",
        js({"type": "boolean"}),
        js({"anyOf": [S, INT]}),
        "fits none of the reader's anyOf alternatives",
        "at #/anyOf/0: type changed",
    ),
    (
        "reader-all-of",
        js(obj_ := {"type": "object"}),
        js({"allOf": [obj_, {"required": ["a"]}]}),
        "property 'a' is required by the reader",
        None,
    ),
    ("opaque-not-added", js(S), js({**S, "not": {"const": ""}}), "keyword 'not' differs", None),
    (
        "recursive-identical",
        js(
            {
                "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
                "$ref": "#/$defs/n",
            }
        ),
        js(
            {
                "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
                "$ref": "#/$defs/n",
            }
        ),
        None,
        None,
    ),
    ("boolean-false-reader", js(True), js(False), "the reader accepts nothing", None),
]


@pytest.mark.parametrize(("old", "new", "mode", "expect"), expand(ROWS))
def test_json_schema_compatibility(old: bytes, new: bytes, mode: str, expect: list[tuple[str, str]]) -> None:
    assert_compat("json_schema", old, new, mode, expect)
