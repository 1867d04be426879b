"""Spark types of schema-registry definitions, and decoded values checked against them (pure).

:func:`avro_type` and :func:`json_schema_type` map a subject's definition to the Spark
``StructType`` of the ``value`` column; what they cannot map is refused with
:class:`~danube_common.errors.ConfigError` naming the place in the schema (``$.field.sub``).
:func:`conform` turns one decoded payload (fastavro's or ``json.loads``' value) into what Arrow
builds that type from, or raises :class:`ValueMismatch` saying where it does not fit.

Avro: a record is a struct (fields in order; nested records too), ``boolean``/``int``/``long``/
``float``/``double``/``string``/``bytes`` the Spark types of those names (``int`` 32-bit,
``long`` 64-bit), ``enum`` a string, ``fixed`` binary, ``array`` an array, ``map`` a map with string
keys, a union of ``null`` and one type that type made nullable; the logical types ``date``,
``timestamp-millis``/``-micros`` (timestamp), ``local-timestamp-millis``/``-micros``
(timestamp_ntz), ``decimal`` (decimal(p, s), p <= 38) and ``uuid`` (string). **Refused:** unions of
two or more non-null types, recursive records, ``time-millis``/``time-micros``, a top level that is
not a record.

JSON Schema: an object with ``properties`` is a struct (properties in the order written),
``string`` a string, ``integer`` a bigint, ``number`` a double, ``boolean`` a boolean, ``array`` an
array of its ``items``, an object without ``properties`` whose ``additionalProperties`` is a schema
a map with string keys; ``"type": [T, "null"]``, or ``anyOf``/``oneOf`` of one schema and
``{"type": "null"}`` (what pydantic writes for ``T | None``), is T made nullable; a ``$ref`` into
the document (``#/$defs/...``, ``#/definitions/...``) is followed; an ``enum`` of strings is a
string. A property is non-nullable only if it is ``required`` and does not admit null.
**Refused:** other combinations (``allOf``, ``anyOf`` of several types, ``not``,
``if``/``then``), several non-null types, recursive ``$ref``, references out of the document, an
array without ``items``, a top level that is not an object with properties. ``format`` is ignored
(a ``date-time`` stays a string). Properties not declared are dropped.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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

_AVRO_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
_AVRO_LOGICAL: dict[str, DataType] = {
    "date": DateType(),
    "timestamp-millis": TimestampType(),
    "timestamp-micros": TimestampType(),
    "local-timestamp-millis": TimestampNTZType(),
    "local-timestamp-micros": TimestampNTZType(),
    "uuid": StringType(),
}
_AVRO_REFUSED_LOGICAL = ("time-millis", "time-micros")
_JSON_PRIMITIVES: dict[str, DataType] = {
    "string": StringType(),
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
}
_JSON_REFUSED = ("allOf", "not", "if", "then", "else", "patternProperties", "dependentSchemas")


class ValueMismatch(ValueError):
    """A decoded value that does not fit the column's type (the message says where)."""


def _refuse(kind: str, where: str, what: str) -> ConfigError:
    return ConfigError(f"decode: {kind} at {where}: {what} is not mapped to a Spark type")


# ---------------------------------------------------------------------------- Avro


def avro_type(definition: str | bytes | Mapping[str, Any]) -> StructType:
    """The struct of an Avro record schema (JSON text or parsed)."""
    schema = json.loads(definition) if isinstance(definition, str | bytes) else definition
    names: dict[str, Any] = {}
    out = _avro(schema, "$", names, (), namespace="")
    if not isinstance(out[0], StructType):
        raise ConfigError(f"decode: the Avro schema is a {_avro_kind(schema)}, not a record")
    return out[0]


def _avro_kind(schema: Any) -> str:
    return schema.get("type", "?") if isinstance(schema, dict) else str(schema)


def _fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _avro(
    schema: Any, where: str, names: dict[str, Any], stack: tuple[str, ...], namespace: str
) -> tuple[DataType, bool]:
    """(type, nullable) of an Avro schema; ``names`` collects named types as they are defined."""
    if isinstance(schema, list):
        branches = [
            b for b in schema if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")
        ]
        if len(branches) != 1:
            kinds = ", ".join(_avro_kind(b) for b in schema)
            raise _refuse("Avro", where, f"the union [{kinds}] (only a union of null and one type is)")
        inner, _ = _avro(branches[0], where, names, stack, namespace)
        return inner, len(branches) < len(schema)
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema], False
        full = _fullname(schema, namespace)
        name = full if full in names else schema
        if name in stack:
            raise _refuse("Avro", where, f"the recursive record {name}")
        if name not in names:
            raise ConfigError(f"decode: Avro schema at {where}: unknown type {schema!r}")
        return _avro(names[name], where, names, stack, namespace)
    if not isinstance(schema, dict):
        raise ConfigError(f"decode: Avro schema at {where}: not a schema: {schema!r}")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical in _AVRO_REFUSED_LOGICAL:
        raise _refuse("Avro", where, f"the logical type {logical}")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        if not 0 < precision <= 38:
            raise _refuse("Avro", where, f"decimal({precision}, {scale}) (Spark's precision is 1..38)")
        if kind == "fixed":
            _define(schema, names, namespace)
        return DecimalType(precision, scale), False
    if isinstance(logical, str) and logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], False
    if kind in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[kind], False
    if kind == "null":
        raise _refuse("Avro", where, "a null outside a union")
    if kind == "enum":
        _define(schema, names, namespace)
        return StringType(), False
    if kind == "fixed":
        _define(schema, names, namespace)
        return BinaryType(), False
    if kind == "array":
        item, nullable = _avro(schema.get("items"), f"{where}[]", names, stack, namespace)
        return ArrayType(item, nullable), False
    if kind == "map":
        value, nullable = _avro(schema.get("values"), f"{where}{{}}", names, stack, namespace)
        return MapType(StringType(), value, nullable), False
    if kind in ("record", "error"):
        full = _define(schema, names, namespace)
        inner_ns = full.rpartition(".")[0]
        fields = []
        for f in schema.get("fields", []):
            t, nullable = _avro(f["type"], f"{where}.{f['name']}", names, (*stack, full), inner_ns)
            fields.append(StructField(f["name"], t, nullable))
        return StructType(fields), False
    if isinstance(kind, str | list):  # {"type": "string"}, {"type": "Name"}, {"type": [...]}
        return _avro(kind, where, names, stack, namespace)
    raise ConfigError(f"decode: Avro schema at {where}: unknown type {kind!r}")


def _define(schema: Mapping[str, Any], names: dict[str, Any], namespace: str) -> str:
    ns = schema.get("namespace") or namespace
    full = _fullname(str(schema["name"]), ns)
    names[full] = schema
    names.setdefault(str(schema["name"]), schema)
    return full


# ---------------------------------------------------------------------------- JSON Schema


def json_schema_type(definition: str | bytes | Mapping[str, Any]) -> StructType:
    """The struct of a JSON Schema whose top level is an object with properties."""
    doc = json.loads(definition) if isinstance(definition, str | bytes) else definition
    t, _ = _json(doc, "$", doc, ())
    if not isinstance(t, StructType):
        raise ConfigError("decode: the JSON Schema's top level is not an object with properties")
    return t


def _json(schema: Any, where: str, doc: Mapping[str, Any], refs: tuple[str, ...]) -> tuple[DataType, bool]:
    """(type, admits null) of a JSON Schema."""
    if not isinstance(schema, dict):
        raise _refuse("JSON Schema", where, f"the schema {schema!r}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _refuse("JSON Schema", where, f"the reference {ref!r} out of the document")
        if ref in refs:
            raise _refuse("JSON Schema", where, f"the recursive reference {ref}")
        return _json(_pointer(doc, ref, where), where, doc, (*refs, ref))
    for key in _JSON_REFUSED:
        if key in schema:
            raise _refuse("JSON Schema", where, f"{key!r}")
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branches = [b for b in schema[key] if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(branches) != 1:
                raise _refuse(
                    "JSON Schema", where, f"{key} of {len(schema[key])} schemas (only one and null is)"
                )
            inner, _ = _json(branches[0], where, doc, refs)
            return inner, len(branches) < len(schema[key])
    kinds = schema.get("type")
    if kinds is None:
        if "properties" in schema:
            kinds = "object"
        elif "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
            kinds = "string"
        else:
            raise _refuse("JSON Schema", where, "a schema without a type")
    listed = [kinds] if isinstance(kinds, str) else list(kinds)
    nullable = "null" in listed
    real = [k for k in listed if k != "null"]
    if set(real) == {"integer", "number"}:
        real = ["number"]
    if len(real) != 1:
        raise _refuse("JSON Schema", where, f"the types {listed}")
    kind = real[0]
    if kind in _JSON_PRIMITIVES:
        return _JSON_PRIMITIVES[kind], nullable
    if kind == "array":
        if not isinstance(schema.get("items"), dict):
            raise _refuse("JSON Schema", where, "an array without one 'items' schema")
        item, item_null = _json(schema["items"], f"{where}[]", doc, refs)
        return ArrayType(item, item_null), nullable
    if kind == "object":
        props = schema.get("properties")
        if props:
            required = set(schema.get("required", []))
            fields = []
            for name, sub in props.items():
                t, admits_null = _json(sub, f"{where}.{name}", doc, refs)
                fields.append(StructField(name, t, admits_null or name not in required))
            return StructType(fields), nullable
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            value, value_null = _json(extra, f"{where}{{}}", doc, refs)
            return MapType(StringType(), value, value_null), nullable
        raise _refuse("JSON Schema", where, "an object without properties or an additionalProperties schema")
    raise _refuse("JSON Schema", where, f"the type {kind!r}")


def _pointer(doc: Mapping[str, Any], ref: str, where: str) -> Any:
    node: Any = doc
    for part in ref.lstrip("#").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"decode: JSON Schema at {where}: {ref} does not point into the document")
        node = node[part]
    return node


# ---------------------------------------------------------------------------- values


def conform(value: Any, t: DataType, where: str = "$") -> Any:
    """``value`` as Arrow builds ``t`` from it (maps become key/value pairs); ValueMismatch if it
    does not fit. Nulls are left to the caller's field (see :func:`_conform_struct`)."""
    if value is None:
        return None
    if isinstance(t, StructType):
        if not isinstance(value, dict):
            raise ValueMismatch(f"{where}: expected an object, got {_kind(value)}")
        return _conform_struct(value, t, where)
    if isinstance(t, ArrayType):
        if not isinstance(value, list | tuple):
            raise ValueMismatch(f"{where}: expected an array, got {_kind(value)}")
        return [_nullable(v, t.elementType, t.containsNull, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(t, MapType):
        if not isinstance(value, dict):
            raise ValueMismatch(f"{where}: expected a map, got {_kind(value)}")
        return [
            (str(k), _nullable(v, t.valueType, t.valueContainsNull, f"{where}.{k}")) for k, v in value.items()
        ]
    if isinstance(t, StringType):
        if isinstance(value, str):
            return value
        if isinstance(value, uuid.UUID):
            return str(value)
    elif isinstance(t, BooleanType):
        if isinstance(value, bool):
            return value
    elif isinstance(t, IntegerType | LongType):
        bits = 32 if isinstance(t, IntegerType) else 64
        if isinstance(value, int) and not isinstance(value, bool):
            if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                return value
            raise ValueMismatch(f"{where}: {value} is out of the {bits}-bit range")
    elif isinstance(t, FloatType | DoubleType):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif isinstance(t, BinaryType):
        if isinstance(value, bytes | bytearray):
            return bytes(value)
        if isinstance(value, str):  # JSON carries binary as base64 text
            try:
                return base64.b64decode(value, validate=True)
            except ValueError:
                pass
    elif isinstance(t, DecimalType):
        if isinstance(value, decimal.Decimal):
            return value
    elif isinstance(t, TimestampNTZType):
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return value
    elif isinstance(t, TimestampType):
        if isinstance(value, dt.datetime):
            return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    elif isinstance(t, DateType) and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    raise ValueMismatch(f"{where}: expected {t.simpleString()}, got {_kind(value)}")


def _conform_struct(value: dict[str, Any], t: StructType, where: str) -> dict[str, Any]:
    return {
        f.name: _nullable(value.get(f.name), f.dataType, f.nullable, f"{where}.{f.name}") for f in t.fields
    }


def _nullable(value: Any, t: DataType, nullable: bool, where: str) -> Any:
    if value is None:
        if not nullable:
            raise ValueMismatch(f"{where}: missing or null")
        return None
    return conform(value, t, where)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)
