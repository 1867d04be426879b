"""Wire strings of schema types and compatibility modes, and what each mode checks."""

from __future__ import annotations

import pytest

from danube_common.errors import InvalidArgument, InvalidSchema
from danube_common.schema import CompatibilityMode, SchemaType, parse_compatibility_mode, parse_schema_type

pytestmark = pytest.mark.unit

M = CompatibilityMode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bytes", SchemaType.BYTES),
        ("string", SchemaType.STRING),
        ("number", SchemaType.NUMBER),
        ("json_schema", SchemaType.JSON_SCHEMA),
        ("avro", SchemaType.AVRO),
        ("protobuf", SchemaType.PROTOBUF),
        ("AVRO", SchemaType.AVRO),
        (" json ", SchemaType.JSON_SCHEMA),
        ("proto", SchemaType.PROTOBUF),
        ("int64", SchemaType.NUMBER),
        ("double", SchemaType.NUMBER),
    ],
)
def test_schema_type_strings(text: str, expected: SchemaType) -> None:
    assert parse_schema_type(text) is expected


def test_schema_type_wire_values_are_danubes() -> None:
    assert [t.value for t in SchemaType] == ["bytes", "string", "number", "json_schema", "avro", "protobuf"]


def test_unknown_schema_type_lists_the_allowed_ones() -> None:
    with pytest.raises(InvalidSchema, match=r"unknown schema type 'xml'.*json_schema") as info:
        parse_schema_type("xml")
    assert isinstance(info.value, InvalidArgument)
    assert info.value.code == "INVALID_SCHEMA"


@pytest.mark.parametrize(
    ("mode", "transitive", "backward", "forward"),
    [
        (M.NONE, False, False, False),
        (M.BACKWARD, False, True, False),
        (M.FORWARD, False, False, True),
        (M.FULL, False, True, True),
        (M.BACKWARD_TRANSITIVE, True, True, False),
        (M.FORWARD_TRANSITIVE, True, False, True),
        (M.FULL_TRANSITIVE, True, True, True),
    ],
)
def test_modes(mode: CompatibilityMode, transitive: bool, backward: bool, forward: bool) -> None:
    assert parse_compatibility_mode(mode.value.upper()) is mode
    assert (mode.transitive, mode.checks_backward, mode.checks_forward) == (transitive, backward, forward)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(InvalidSchema, match=r"unknown compatibility mode 'sideways'.*full_transitive"):
        parse_compatibility_mode("sideways")
