"""The schema registry's pure core: schema types, definitions, fingerprints, payload validation
and compatibility. No I/O: the registry service, its etcd storage and the broker's publish path
build on this API.

    schema = compile_schema("avro", definition)            # raises InvalidSchema with the reason
    schema.fingerprint                                      # "sha256:<hex>", the dedup key
    validate_batch(schema, payloads, first_only=True)       # [PayloadError(index, reason)]
    check_compatibility(schema, {1: v1, 2: v2}, parse_compatibility_mode("backward"))

Module by module: :mod:`.types` (wire strings, modes, the compiled form), :mod:`.primitive`
(bytes, string, number), :mod:`.json_schema`, :mod:`.avro`, :mod:`.protobuf` (definitions and
payloads), :mod:`.json_compat`, :mod:`.avro_compat`, :mod:`.protobuf_compat` (each format's
rules), :mod:`.compat` (modes and versions), :mod:`.validate` (compiling, caching, batches).
"""

from .avro import AvroSchema
from .compat import check_compatibility, read_errors
from .json_schema import JsonSchema
from .primitive import BytesSchema, NumberSchema, StringSchema
from .protobuf import ProtobufSchema
from .types import (
    DEFAULT_COMPATIBILITY_MODE,
    CompatibilityMode,
    CompatibilityResult,
    CompiledSchema,
    PayloadError,
    SchemaType,
    fingerprint_of,
    parse_compatibility_mode,
    parse_schema_type,
)
from .validate import CompileCache, compile_schema, validate_batch

__all__ = [
    "DEFAULT_COMPATIBILITY_MODE",
    "AvroSchema",
    "BytesSchema",
    "CompatibilityMode",
    "CompatibilityResult",
    "CompileCache",
    "CompiledSchema",
    "JsonSchema",
    "NumberSchema",
    "PayloadError",
    "ProtobufSchema",
    "SchemaType",
    "StringSchema",
    "check_compatibility",
    "compile_schema",
    "fingerprint_of",
    "parse_compatibility_mode",
    "parse_schema_type",
    "read_errors",
    "validate_batch",
]
