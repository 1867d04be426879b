"""Compiling definitions, caching compiled schemas, and validating payloads in batches.

:func:`compile_schema` is the one entry point from (type, definition bytes) to a
:class:`~.types.CompiledSchema`; it raises :class:`~danube_common.errors.InvalidSchema` with what is
wrong. Compiling is the expensive part (JSON Schema metaschema check, Avro parsing, protoc), so a
publish path keeps a :class:`CompileCache` and compiles each definition once.

:func:`validate_batch` runs one compiled schema over many payloads (the validator instance, parsed
Avro schema or message class is built once and reused) and reports each invalid payload as
``PayloadError(index, reason)`` — or only the first with ``first_only=True``, which is what a
publish that is refused as a whole needs.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

from .avro import compile_avro
from .json_schema import compile_json_schema
from .primitive import BytesSchema, NumberSchema, StringSchema
from .protobuf import compile_protobuf
from .types import CompiledSchema, PayloadError, SchemaType, parse_schema_type


def compile_schema(
    schema_type: SchemaType | str, definition: bytes, *, message_name: str | None = None
) -> CompiledSchema:
    """Parse and check ``definition`` as a schema of ``schema_type`` (an enum or a wire string).

    ``message_name`` picks the Protobuf message type (default: the main file's first message) and is
    ignored for other types. The definition of ``bytes``, ``string`` and ``number`` is not read.
    """
    kind = schema_type if isinstance(schema_type, SchemaType) else parse_schema_type(schema_type)
    if kind is SchemaType.BYTES:
        return BytesSchema()
    if kind is SchemaType.STRING:
        return StringSchema()
    if kind is SchemaType.NUMBER:
        return NumberSchema()
    if kind is SchemaType.JSON_SCHEMA:
        return compile_json_schema(definition)
    if kind is SchemaType.AVRO:
        return compile_avro(definition)
    return compile_protobuf(definition, message_name=message_name)


def validate_batch(
    schema: CompiledSchema, payloads: Sequence[bytes], *, first_only: bool = False
) -> list[PayloadError]:
    """The payloads that do not validate, in batch order (empty: all are valid)."""
    validate = schema.validate
    errors: list[PayloadError] = []
    for index, payload in enumerate(payloads):
        reason = validate(payload)
        if reason is not None:
            errors.append(PayloadError(index, reason))
            if first_only:
                break
    return errors


class CompileCache:
    """Compiled schemas, least recently used first out, keyed by the exact definition and by
    fingerprint (so a broker can look a schema up by the fingerprint the registry stores).

    Not locked: use it from one thread (the event loop), or compile in a thread and insert from it.
    """

    def __init__(self, *, max_entries: int = 1024) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._by_source: OrderedDict[tuple[SchemaType, str | None, bytes], CompiledSchema] = OrderedDict()
        self._by_fingerprint: dict[str, CompiledSchema] = {}

    def __len__(self) -> int:
        return len(self._by_source)

    def compile(
        self, schema_type: SchemaType | str, definition: bytes, *, message_name: str | None = None
    ) -> CompiledSchema:
        """:func:`compile_schema`, once per distinct (type, definition, message name)."""
        kind = schema_type if isinstance(schema_type, SchemaType) else parse_schema_type(schema_type)
        key = (kind, message_name, hashlib.sha256(definition).digest())
        hit = self._by_source.get(key)
        if hit is not None:
            self._by_source.move_to_end(key)
            return hit
        compiled = compile_schema(kind, definition, message_name=message_name)
        self._by_source[key] = compiled
        self._by_fingerprint[compiled.fingerprint] = compiled
        while len(self._by_source) > self.max_entries:
            _, evicted = self._by_source.popitem(last=False)
            if self._by_fingerprint.get(evicted.fingerprint) is evicted:
                del self._by_fingerprint[evicted.fingerprint]
        return compiled

    def by_fingerprint(self, fingerprint: str) -> CompiledSchema | None:
        """A cached schema with this fingerprint, if any."""
        return self._by_fingerprint.get(fingerprint)
