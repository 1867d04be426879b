"""Checking a new schema against a subject's existing versions under a compatibility mode.

- ``none``: always compatible.
- Non-transitive modes compare with the **latest** existing version only; ``*_transitive`` modes
  with **every** existing version.
- ``backward``: the new schema reads each compared version's data (reader = new, writer = old);
  ``forward``: each compared version reads the new schema's data (reader = old, writer = new);
  ``full``: both.
- A change of schema type (e.g. ``avro`` to ``json_schema``) is incompatible in every mode but
  ``none``. ``bytes``, ``string`` and ``number`` are compatible with themselves.
- The per-format rules are in :mod:`.json_compat`, :mod:`.avro_compat` and :mod:`.protobuf_compat`;
  Protobuf adds its evolution rule (removed fields reserved) in every checking mode.

Each error names the direction and the version it fails against, e.g.
``backward (new schema reading version 3 data): at #/properties/age: type changed: ...``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .avro import AvroSchema
from .avro_compat import avro_read_errors
from .json_compat import json_read_errors
from .json_schema import JsonSchema
from .protobuf import ProtobufSchema
from .protobuf_compat import protobuf_evolution_errors, protobuf_read_errors
from .types import CompatibilityMode, CompatibilityResult, CompiledSchema


def read_errors(reader: CompiledSchema, writer: CompiledSchema) -> list[str]:
    """Why a consumer using ``reader`` may fail on data valid under ``writer`` (empty: it will not)."""
    if reader.schema_type != writer.schema_type:
        return [f"schema type changed from {writer.schema_type.value} to {reader.schema_type.value}"]
    if isinstance(reader, JsonSchema) and isinstance(writer, JsonSchema):
        return json_read_errors(reader.document, writer.document)
    if isinstance(reader, AvroSchema) and isinstance(writer, AvroSchema):
        return avro_read_errors(reader.parsed, reader.named, writer.parsed, writer.named)
    if isinstance(reader, ProtobufSchema) and isinstance(writer, ProtobufSchema):
        return protobuf_read_errors(reader.descriptor, writer.descriptor)
    return []  # bytes, string, number: same type, nothing more to compare


def check_compatibility(
    new: CompiledSchema,
    existing: Mapping[int, CompiledSchema],
    mode: CompatibilityMode,
) -> CompatibilityResult:
    """Is ``new`` allowed as the next version of a subject whose versions are ``existing``?

    ``existing`` maps version number to compiled schema (any order; the highest number is the
    latest). An empty subject accepts anything.
    """
    if mode is CompatibilityMode.NONE or not existing:
        return CompatibilityResult(True)
    versions = sorted(existing) if mode.transitive else [max(existing)]
    errors: list[str] = []
    for version in versions:
        old = existing[version]
        if old.schema_type != new.schema_type:
            errors.append(
                f"version {version}: schema type changed from {old.schema_type.value} to {new.schema_type.value}"
            )
            continue
        if mode.checks_backward:
            prefix = f"backward (new schema reading version {version} data)"
            errors += [f"{prefix}: {e}" for e in read_errors(new, old)]
        if mode.checks_forward:
            prefix = f"forward (version {version} reading new schema data)"
            errors += [f"{prefix}: {e}" for e in read_errors(old, new)]
        if isinstance(new, ProtobufSchema) and isinstance(old, ProtobufSchema):
            prefix = f"evolution from version {version}"
            errors += [f"{prefix}: {e}" for e in protobuf_evolution_errors(new.descriptor, old.descriptor)]
    return CompatibilityResult(not errors, tuple(errors))
