"""``avro``: definitions are Avro schemas (JSON); payloads are one Avro datum in binary encoding.

Definition (at registration): UTF-8 JSON parsed by ``fastavro.parse_schema``, which checks names,
types, duplicate fields and symbols, and that defaults match their types; its message is passed on.
Canonical form: the JSON with sorted keys and no whitespace (field and symbol order kept). It is
not Avro's "Parsing Canonical Form", which drops ``default`` and ``aliases``: two schemas that differ
in a default are different versions here, since defaults decide compatibility.

Payload framing: a single datum in Avro **binary encoding, without any container or header**
(what ``fastavro.schemaless_writer`` and Avro's ``BinaryEncoder`` produce, as Pulsar and Kafka
serializers write after their own framing). The payload must decode completely: trailing bytes are
invalid. Upstream Danube is not a reference here: its validator opens the payload as an Avro
object container file while its own example producer sends JSON text, so the two disagree.
Logical types are decoded too (e.g. a ``uuid`` string must be a UUID).
"""

from __future__ import annotations

import io
import re
from typing import Any

import fastavro
from fastavro.read import schemaless_reader

from danube_common.errors import InvalidSchema

from .types import CompiledSchema, SchemaType, canonical_json, fingerprint_of, load_json_definition


class AvroSchema(CompiledSchema):
    schema_type = SchemaType.AVRO

    def __init__(self, document: Any, parsed: Any, named: dict[str, Any]) -> None:
        #: The definition as written (JSON value).
        self.document = document
        #: fastavro's parsed form (full names expanded; named types referenced by name).
        self.parsed = parsed
        #: Full name -> parsed definition of every named type (record, enum, fixed).
        self.named = named
        self.canonical = canonical_json(document)
        self.fingerprint = fingerprint_of(self.canonical)

    def validate(self, payload: bytes) -> str | None:
        buf = io.BytesIO(payload)
        try:
            schemaless_reader(buf, self.parsed, None)
        except EOFError:
            return f"not a complete Avro datum: the payload ends early ({len(payload)} bytes)"
        except Exception as exc:  # fastavro raises many kinds on bad input
            return f"not a valid Avro datum: {type(exc).__name__}: {exc}"
        end = buf.tell()
        if end != len(payload):
            return f"not a single Avro datum: {len(payload) - end} trailing bytes after offset {end}"
        return None


def compile_avro(definition: bytes) -> AvroSchema:
    """Parse and check an Avro schema; raises :class:`InvalidSchema` saying what is wrong."""
    document = load_json_definition(definition, "Avro schema")
    if not isinstance(document, dict | list | str):
        raise InvalidSchema(
            f"invalid Avro schema: expected a JSON object, array (union) or string (type name), "
            f"not {type(document).__name__}"
        )
    _check_structure(document, "")
    try:
        named: dict[str, Any] = {}
        parsed = fastavro.parse_schema(document, named_schemas=named)
    except Exception as exc:  # SchemaParseException, UnknownType (a ValueError), KeyError...
        detail = f"unknown type {exc}" if type(exc).__name__ == "UnknownType" else str(exc)
        raise InvalidSchema(f"invalid Avro schema: {detail or type(exc).__name__}") from exc
    return AvroSchema(document, parsed, named)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _bad(path: str, msg: str) -> InvalidSchema:
    return InvalidSchema(f"invalid Avro schema at {path or '(top level)'}: {msg}")


def _check_name(node: dict[str, Any], key: str, path: str) -> str:
    name = node.get(key)
    if not isinstance(name, str) or not all(_NAME.fullmatch(p) for p in name.split(".")):
        raise _bad(
            path, f"{key} {name!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*, dotted for a full name)"
        )
    return name


def _check_structure(node: Any, path: str) -> None:
    """What fastavro lets through: missing or duplicate fields, bad names, missing items/values/size."""
    if isinstance(node, list):
        for i, branch in enumerate(node):
            if isinstance(branch, list):
                raise _bad(f"{path}[{i}]", "a union may not directly contain another union")
            _check_structure(branch, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind is None:
        raise _bad(path, "a schema object needs a 'type'")
    if isinstance(kind, dict | list):
        _check_structure(kind, path)
    elif kind in ("record", "error"):
        name = _check_name(node, "name", path)
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise _bad(path, f"record {name!r} needs a 'fields' array")
        seen: set[str] = set()
        for field in fields:
            if not isinstance(field, dict) or "type" not in field:
                raise _bad(path, f"every field of record {name!r} needs a 'name' and a 'type'")
            fname = _check_name(field, "name", f"{path}/{name}")
            if fname in seen:
                raise _bad(path, f"record {name!r} has two fields named {fname!r}")
            seen.add(fname)
            _check_structure(field["type"], f"{path}/{name}.{fname}")
    elif kind == "enum":
        name = _check_name(node, "name", path)
        symbols = node.get("symbols")
        if not isinstance(symbols, list) or not all(
            isinstance(s, str) and _NAME.fullmatch(s) for s in symbols
        ):
            raise _bad(path, f"enum {name!r} needs 'symbols', an array of Avro names")
    elif kind == "fixed":
        name = _check_name(node, "name", path)
        size = node.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise _bad(path, f"fixed {name!r} needs a 'size', a non-negative integer")
    elif kind == "array":
        if "items" not in node:
            raise _bad(path, "an array needs 'items'")
        _check_structure(node["items"], f"{path}[]")
    elif kind == "map":
        if "values" not in node:
            raise _bad(path, "a map needs 'values'")
        _check_structure(node["values"], f"{path}{{}}")
