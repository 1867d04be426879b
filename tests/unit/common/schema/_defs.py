"""Helpers shared by the schema tests: definitions as bytes."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2

from danube_common.schema import ProtobufSchema, compile_schema


def js(doc: Any) -> bytes:
    """A JSON definition as bytes."""
    return json.dumps(doc).encode()


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An Avro record."""
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def proto3(body: str, package: str = "shop") -> bytes:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'.encode()


def proto2(body: str, package: str = "shop") -> bytes:
    return f'syntax = "proto2";\npackage {package};\n{body}\n'.encode()


def descriptor_set(text: bytes) -> bytes:
    """The FileDescriptorSet protoc makes of ``text`` (dependencies included)."""
    schema = compile_schema("protobuf", text)
    assert isinstance(schema, ProtobufSchema)
    return descriptor_pb2.FileDescriptorSet(file=schema.files).SerializeToString()


# ---- compatibility tables
# A row is (id, old definition, new definition, backward, forward): backward/forward is None when
# that direction is compatible, else a fragment one of its errors must contain.
Row = tuple[str, bytes, bytes, str | None, str | None]

#: (mode, checks backward, checks forward)
DIRECTIONAL_MODES = [
    ("none", False, False),
    ("backward", True, False),
    ("forward", False, True),
    ("full", True, True),
]


def expand(rows: list[Row]) -> list[Any]:
    """One pytest param per row and mode: (old, new, mode, [(direction, fragment)])."""
    import pytest

    out = []
    for rid, old, new, bw, fw in rows:
        for mode, checks_bw, checks_fw in DIRECTIONAL_MODES:
            expect = [("backward", bw)] if checks_bw and bw else []
            expect += [("forward", fw)] if checks_fw and fw else []
            out.append(pytest.param(old, new, mode, expect, id=f"{rid}-{mode}"))
    return out


def assert_compat(type_: str, old: bytes, new: bytes, mode: str, expect: list[tuple[str, str]]) -> None:
    from danube_common.schema import check_compatibility, parse_compatibility_mode

    result = check_compatibility(
        compile_schema(type_, new), {1: compile_schema(type_, old)}, parse_compatibility_mode(mode)
    )
    if not expect:
        assert result.compatible, result.errors
        assert result.errors == ()
        return
    assert not result.compatible
    for direction, fragment in expect:
        matching = [e for e in result.errors if e.startswith((direction, "evolution")) and fragment in e]
        assert matching, f"no {direction} error with {fragment!r} in {result.errors}"
