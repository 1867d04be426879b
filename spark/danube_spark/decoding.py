"""Decoded payloads: the ``value`` and ``decode_error`` columns of ``decode=true`` reads.

The driver resolves the schema once (:func:`resolve_spec`): the subject (given, or the one the
topic is bound to), the version whose Spark type becomes the ``value`` column (given, else the
latest), and the definitions of every version of the subject, all asked of the schema registry
(the lookup service). The resulting :class:`DecodeSpec` travels to the executors with the
reader, so executors ask no one: :class:`PayloadDecoder` decodes each payload with the version
it was written with (its ``schema_version``; messages without a schema id with the chosen
version), Avro resolved to the chosen version (fields added with defaults, promotions ...),
and checks the result against the column's type (:func:`~danube_spark.value_types.conform`).

A payload that does not decode or fit gives a null ``value`` and the reason in ``decode_error``
(the query goes on); so does one that carries another subject's schema id, or a version
registered after the query resolved the subject.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType

from danube_common.errors import ConfigError, NotFound
from danube_spark.value_types import ValueMismatch, avro_type, conform, json_schema_type

#: Schema types whose payloads are decoded into a struct.
DECODED_TYPES = ("avro", "json_schema")


@dataclass(frozen=True, slots=True)
class DecodeSpec:
    """What executors need to decode a subject's payloads (picklable, no connection)."""

    subject: str
    schema_type: str
    schema_id: int
    #: The version whose type is the ``value`` column's.
    version: int
    #: ``StructType.json()`` of the ``value`` column.
    value_type_json: str
    #: (version, definition) of the subject's versions known when the read was planned.
    definitions: tuple[tuple[int, bytes], ...]

    @property
    def value_type(self) -> StructType:
        return StructType.fromJson(json.loads(self.value_type_json))

    def fields(self) -> list[StructField]:
        """The columns added at the end of the row: ``value`` and ``decode_error``."""
        return [StructField("value", self.value_type, True), StructField("decode_error", StringType(), True)]


def spark_type(schema_type: str, definition: bytes, *, subject: str) -> StructType:
    """The ``value`` type of one version (ConfigError for types or shapes not mapped)."""
    if schema_type == "avro":
        return avro_type(definition)
    if schema_type == "json_schema":
        return json_schema_type(definition)
    raise ConfigError(
        f"decode: schema subject {subject!r} holds {schema_type} schemas; only Avro and JSON Schema "
        "payloads are decoded into columns (decode the payload column in the query instead)"
    )


async def resolve_spec(
    registry: Any, topics: Sequence[str], subject: str | None, version: int | None
) -> DecodeSpec:
    """Ask ``registry`` (a :class:`danube_sdk.schema_registry.SchemaRegistryClient`) for the
    spec of ``subject`` (None: the subject ``topics`` are bound to, the same for all)."""
    from danube_sdk.schema_registry import schema_type_of

    if subject is None:
        bound: dict[str, str] = {}
        for t in topics:
            try:
                bound[t] = (await registry.topic_config(t)).subject
            except NotFound:
                raise ConfigError(
                    f"decode: topic {t} has no schema subject: bind one (danube-admin topics set-schema) "
                    "or name it with the schema subject option"
                ) from None
        subjects = sorted(set(bound.values()))
        if len(subjects) != 1:
            raise ConfigError(
                f"decode: the topics read are bound to different schema subjects {bound}: "
                "name one with the schema subject option"
            )
        subject = subjects[0]
    try:
        info = await (registry.version(subject, version) if version else registry.latest(subject))
    except NotFound as exc:
        raise ConfigError(f"decode: {exc.message}") from None
    kind = schema_type_of(info.schema_type)
    value_type = spark_type(kind, info.definition, subject=subject)
    definitions: list[tuple[int, bytes]] = [(info.version, info.definition)]
    if kind == "avro":  # binary Avro needs the writer's schema: every version's definition
        for v in await registry.versions(subject):
            if v.version != info.version:
                definitions.append((v.version, (await registry.version(subject, v.version)).definition))
    return DecodeSpec(
        subject=subject,
        schema_type=kind,
        schema_id=info.schema_id,
        version=info.version,
        value_type_json=value_type.json(),
        definitions=tuple(sorted(definitions)),
    )


class PayloadDecoder:
    """The executor's half: payload -> (value as Arrow builds it, None) or (None, reason)."""

    def __init__(self, spec: DecodeSpec) -> None:
        self.spec = spec
        self.value_type = spec.value_type
        self._defs = dict(spec.definitions)
        self._by_version: dict[int, Callable[[bytes], Any]] = {}
        self.values: list[Any] = []
        self.errors: list[str | None] = []

    def _decoder(self, version: int) -> Callable[[bytes], Any]:
        fn = self._by_version.get(version)
        if fn is None:
            fn = self._make(version)
            self._by_version[version] = fn
        return fn

    def _make(self, version: int) -> Callable[[bytes], Any]:
        spec = self.spec
        if spec.schema_type == "json_schema":
            return json.loads  # checked against the column's type by conform()
        import fastavro
        from fastavro.read import schemaless_reader

        writer = fastavro.parse_schema(json.loads(self._defs[version]))
        reader = None
        if version != spec.version:
            reader = fastavro.parse_schema(json.loads(self._defs[spec.version]))

        def from_avro(payload: bytes) -> Any:
            buf = io.BytesIO(payload)
            value = schemaless_reader(buf, writer, reader)
            if buf.tell() != len(payload):
                raise ValueError(f"{len(payload) - buf.tell()} bytes left after the Avro datum")
            return value

        return from_avro

    def decode(
        self, payload: bytes, schema_id: int | None, schema_version: int | None
    ) -> tuple[Any, str | None]:
        spec = self.spec
        if schema_id is not None and schema_id != spec.schema_id:
            return None, f"schema id {schema_id} is not that of subject {spec.subject!r} ({spec.schema_id})"
        version = spec.version if schema_id is None or schema_version is None else schema_version
        if version not in self._defs:
            return None, (
                f"version {version} of subject {spec.subject!r} was not registered when the read was planned"
            )
        try:
            value = self._decoder(version)(payload)
        except Exception as exc:  # fastavro / json raise many types; the row says which
            return (
                None,
                f"payload does not decode as {spec.schema_type} version {version}: {type(exc).__name__}: {exc}",
            )
        try:
            return conform(value, self.value_type), None
        except ValueMismatch as exc:
            return None, f"decoded value does not fit the value column (version {spec.version}): {exc}"

    # ------------------------------------------------------------------ columns of a batch

    def add(self, payload: bytes, schema_id: int | None, schema_version: int | None) -> None:
        value, error = self.decode(payload, schema_id, schema_version)
        self.values.append(value)
        self.errors.append(error)

    def add_undecodable(self, reason: str) -> None:
        self.values.append(None)
        self.errors.append(reason)

    def take(self, value_field: Any, error_field: Any) -> list[Any]:
        """The ``value`` and ``decode_error`` arrays of the rows added so far (and start afresh)."""
        import pyarrow as pa

        arrays = [pa.array(self.values, type=value_field.type), pa.array(self.errors, type=error_field.type)]
        self.values, self.errors = [], []
        return arrays


def fetch_spec(
    url: str, topics: Sequence[str], subject: str | None, version: int | None, *, token: str | None = None
) -> DecodeSpec:
    """:func:`resolve_spec` against the registry at ``url`` (blocking: the driver calls it)."""
    from danube_sdk.schema_registry import SchemaRegistryClient
    from danube_spark.topic_io import run_async

    async def go() -> DecodeSpec:
        async with SchemaRegistryClient.connect(url, token=token) as registry:
            return await resolve_spec(registry, topics, subject, version)

    return run_async(go())
