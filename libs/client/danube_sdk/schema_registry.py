"""The schema registry client (``danube_schema.SchemaRegistry``) and its small typed records.

``client.schemas()`` talks to the service URL (the lookup service serves the registry there);
:meth:`SchemaRegistryClient.connect` makes a standalone one for any URL (``danube-admin`` uses
the admin port, which serves the registry too). Every call has the client's ``rpc_timeout_s``;
failures are the SDK's :class:`~danube_common.errors.DanubeError` classes (``NotFound`` for an
unknown subject, id or version; ``InvalidSchema``; ``IncompatibleSchema``; ``Unavailable`` ...).

Besides the RPCs it resolves a :class:`SchemaReference` to one version (as Danube's clients do:
``GetLatestSchema``, then ``GetSchema(id, version)`` for a pinned older version) and decodes
received messages by the schema id and version they carry (:meth:`SchemaRegistryClient.decode`).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from danube_common.errors import InvalidArgument, InvalidPayload, InvalidSchema, NotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import SchemaRegistry_pb2 as spb
from danube_sdk.auth import ChannelSecurity, TlsOptions, TokenSupplier
from danube_sdk.connection import Connections
from danube_sdk.schemas import Schema, SchemaReference, decode_avro
from danube_sdk.types import Message

if TYPE_CHECKING:
    from danube_common.schema import CompatibilityMode, SchemaType

T = TypeVar("T")

#: Schema types (wire strings) and the aliases the registry accepts for them.
SCHEMA_TYPES = ("bytes", "string", "number", "json_schema", "avro", "protobuf")
_TYPE_ALIASES = {"json": "json_schema", "proto": "protobuf"}
#: Compatibility modes (wire strings).
COMPATIBILITY_MODES = (
    "none",
    "backward",
    "forward",
    "full",
    "backward_transitive",
    "forward_transitive",
    "full_transitive",
)

#: Validation policies of a topic (``ConfigureTopicSchema``).
VALIDATION_POLICIES = ("none", "warn", "enforce")
#: Decoders kept by :meth:`SchemaRegistryClient.decode` (least recently used out first).
_DECODERS_KEPT = 256


# ---------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One version of a subject, definition included (``GetSchema``/``GetLatestSchema``)."""

    schema_id: int
    version: int
    subject: str
    schema_type: str
    definition: bytes
    fingerprint: str
    compatibility_mode: str
    description: str = ""
    created_at_s: int = 0
    created_by: str = ""
    tags: tuple[str, ...] = ()

    @property
    def definition_text(self) -> str:
        """The definition as text (JSON Schema, Avro, ``.proto``); binary ones are shown escaped."""
        return self.definition.decode("utf-8", errors="backslashreplace")

    @classmethod
    def from_proto(cls, r: spb.GetSchemaResponse) -> SchemaInfo:
        return cls(
            schema_id=r.schema_id,
            version=r.version,
            subject=r.subject,
            schema_type=r.schema_type,
            definition=r.schema_definition,
            fingerprint=r.fingerprint,
            compatibility_mode=r.compatibility_mode,
            description=r.description,
            created_at_s=r.created_at,
            created_by=r.created_by,
            tags=tuple(r.tags),
        )


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """What ``RegisterSchema`` answered: ``is_new_version`` is False for a definition the subject
    already had (that version's numbers are returned)."""

    subject: str
    schema_id: int
    version: int
    is_new_version: bool
    fingerprint: str


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One entry of ``ListVersions``."""

    version: int
    schema_id: int
    fingerprint: str
    created_at_s: int = 0
    created_by: str = ""
    description: str = ""


@dataclass(frozen=True, slots=True)
class CompatibilityCheck:
    compatible: bool
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicSchemaConfig:
    """A topic's schema binding: its subject, validation policy and whether payloads are checked."""

    topic: str
    subject: str
    validation_policy: str
    enable_payload_validation: bool
    schema_id: int


@dataclass(frozen=True, slots=True)
class SubjectSummary:
    subject: str
    schema_type: str
    latest_version: int
    compatibility_mode: str
    schema_id: int
    tags: tuple[str, ...] = ()


# ---------------------------------------------------------------------------- client


def _as_bytes(definition: bytes | str) -> bytes:
    return definition.encode() if isinstance(definition, str) else bytes(definition)


def schema_type_of(value: SchemaType | str) -> str:
    """The canonical wire string of a schema type (case-insensitive; ``json``, ``proto`` accepted)."""
    key = str(value).strip().lower()
    key = _TYPE_ALIASES.get(key, key)
    if key not in SCHEMA_TYPES:
        raise InvalidSchema(f"unknown schema type {value!r}: expected one of {', '.join(SCHEMA_TYPES)}")
    return key


def compatibility_mode_of(value: CompatibilityMode | str) -> str:
    """The canonical wire string of a compatibility mode (case-insensitive)."""
    key = str(value).strip().lower()
    if key not in COMPATIBILITY_MODES:
        raise InvalidSchema(
            f"unknown compatibility mode {value!r}: expected one of {', '.join(COMPATIBILITY_MODES)}"
        )
    return key


def _policy(value: str) -> str:
    policy = value.strip().lower()
    if policy not in VALIDATION_POLICIES:
        raise InvalidArgument(
            f"unknown validation policy {value!r}: expected one of {', '.join(VALIDATION_POLICIES)}"
        )
    return policy


class SchemaRegistryClient:
    """Async client of the schema registry. From ``client.schemas()``, or
    ``async with SchemaRegistryClient.connect(url) as registry: ...``."""

    def __init__(self, conns: Connections, url: str | None = None, *, owns_connections: bool = False) -> None:
        self._conns = conns
        self.url = url or conns.service_url
        self._owns = owns_connections
        self._decoders: OrderedDict[tuple[int, int], Callable[[bytes], Any]] = OrderedDict()

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        rpc_timeout_s: float = 10.0,
        tls: TlsOptions | None = None,
        token: str | None = None,
        token_supplier: TokenSupplier | None = None,
    ) -> SchemaRegistryClient:
        """A registry client with its own channel to ``url`` (closed by :meth:`aclose`);
        ``tls``, ``token`` and ``token_supplier`` as for :class:`~danube_sdk.DanubeClient`."""
        if not url:
            raise ValueError("url is required, e.g. http://127.0.0.1:6650")
        security = ChannelSecurity(url, tls=tls, token=token, token_supplier=token_supplier)
        return cls(
            Connections(url, rpc_timeout_s=rpc_timeout_s, security=security), url, owns_connections=True
        )

    async def aclose(self) -> None:
        if self._owns:
            await self._conns.aclose()

    async def __aenter__(self) -> SchemaRegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: Callable[..., Awaitable[T]], request: object) -> T:
        return await self._conns.call_service(
            method(request, timeout=self._conns.rpc_timeout_s), url=self.url
        )

    @property
    def _stub(self) -> Any:
        return self._conns.stubs(self.url).registry

    # ------------------------------------------------------------------ subjects and versions

    async def register(
        self,
        subject: str,
        schema_type: SchemaType | str,
        definition: bytes | str,
        *,
        description: str = "",
        created_by: str = "",
        tags: Iterable[str] = (),
    ) -> RegisteredSchema:
        """Register ``definition`` under ``subject`` (created on first use). An identical
        definition returns its existing version; a new one must pass the subject's compatibility
        mode (else :class:`IncompatibleSchema` with the reasons)."""
        req = spb.RegisterSchemaRequest(
            subject=subject,
            schema_type=schema_type_of(schema_type),
            schema_definition=_as_bytes(definition),
            description=description,
            created_by=created_by,
            tags=list(tags),
        )
        r = await self._call(self._stub.RegisterSchema, req)
        return RegisteredSchema(subject, r.schema_id, r.version, r.is_new_version, r.fingerprint)

    async def get(self, schema_id: int, version: int | None = None) -> SchemaInfo:
        """The schema with ``schema_id`` (one id per subject): ``version``, or the latest."""
        req = spb.GetSchemaRequest(schema_id=schema_id)
        if version is not None:
            req.version = version
        return SchemaInfo.from_proto(await self._call(self._stub.GetSchema, req))

    async def latest(self, subject: str) -> SchemaInfo:
        """The latest version of ``subject``."""
        req = spb.GetLatestSchemaRequest(subject=subject)
        return SchemaInfo.from_proto(await self._call(self._stub.GetLatestSchema, req))

    async def version(self, subject: str, version: int) -> SchemaInfo:
        """Version ``version`` of ``subject``."""
        latest = await self.latest(subject)
        return latest if latest.version == version else await self.get(latest.schema_id, version)

    async def versions(self, subject: str) -> list[SchemaVersion]:
        r = await self._call(self._stub.ListVersions, spb.ListVersionsRequest(subject=subject))
        return [
            SchemaVersion(v.version, v.schema_id, v.fingerprint, v.created_at, v.created_by, v.description)
            for v in r.versions
        ]

    async def subjects(self) -> list[SubjectSummary]:
        r = await self._call(self._stub.ListSubjects, spb.ListSubjectsRequest())
        return [
            SubjectSummary(
                s.subject, s.schema_type, s.latest_version, s.compatibility_mode, s.schema_id, tuple(s.tags)
            )
            for s in r.subjects
        ]

    async def check(
        self,
        subject: str,
        schema_type: SchemaType | str,
        definition: bytes | str,
        *,
        mode: CompatibilityMode | str | None = None,
    ) -> CompatibilityCheck:
        """Would ``definition`` be accepted as the next version of ``subject``? Under the subject's
        mode, or ``mode`` for this check only. Nothing is registered."""
        req = spb.CheckCompatibilityRequest(
            subject=subject,
            schema_type=schema_type_of(schema_type),
            new_schema_definition=_as_bytes(definition),
        )
        if mode is not None:
            req.compatibility_mode = compatibility_mode_of(mode)
        r = await self._call(self._stub.CheckCompatibility, req)
        return CompatibilityCheck(r.is_compatible, tuple(r.errors))

    async def delete_version(self, subject: str, version: int) -> str:
        """Delete one version (not the only one left); its number is never reused. Returns the
        registry's message."""
        req = spb.DeleteSchemaVersionRequest(subject=subject, version=version)
        return str((await self._call(self._stub.DeleteSchemaVersion, req)).message)

    async def set_compatibility(self, subject: str, mode: CompatibilityMode | str) -> str:
        """Set ``subject``'s compatibility mode (checked on every later registration)."""
        req = spb.SetCompatibilityModeRequest(subject=subject, compatibility_mode=compatibility_mode_of(mode))
        return str((await self._call(self._stub.SetCompatibilityMode, req)).message)

    async def get_compatibility(self, subject: str) -> str:
        """``subject``'s compatibility mode."""
        return (await self.latest(subject)).compatibility_mode

    # ------------------------------------------------------------------ topics

    async def configure_topic(
        self,
        topic: str,
        subject: str,
        *,
        validation_policy: str = "none",
        enable_payload_validation: bool = False,
    ) -> str:
        """Bind ``topic`` (every partition of it) to ``subject`` with a validation policy:
        ``none``, ``warn`` or ``enforce`` (producers with another subject, or none, are refused);
        ``enable_payload_validation`` makes the broker check every payload (with ``enforce``,
        a batch with an invalid payload is refused)."""
        req = spb.ConfigureTopicSchemaRequest(
            topic_name=topic,
            schema_subject=subject,
            validation_policy=_policy(validation_policy),
            enable_payload_validation=enable_payload_validation,
        )
        return str((await self._call(self._stub.ConfigureTopicSchema, req)).message)

    async def set_topic_validation(
        self, topic: str, validation_policy: str, *, enable_payload_validation: bool = False
    ) -> str:
        """Change the validation policy of a topic that has a schema (its subject stays)."""
        req = spb.UpdateTopicValidationPolicyRequest(
            topic_name=topic,
            validation_policy=_policy(validation_policy),
            enable_payload_validation=enable_payload_validation,
        )
        return str((await self._call(self._stub.UpdateTopicValidationPolicy, req)).message)

    async def topic_config(self, topic: str) -> TopicSchemaConfig:
        """``topic``'s schema binding; :class:`NotFound` if it has none."""
        r = await self._call(
            self._stub.GetTopicSchemaConfig, spb.GetTopicSchemaConfigRequest(topic_name=topic)
        )
        return TopicSchemaConfig(
            topic, r.schema_subject, r.validation_policy, r.enable_payload_validation, r.schema_id
        )

    # ------------------------------------------------------------------ references and decoding

    async def resolve(self, ref: SchemaReference) -> SchemaInfo:
        """The version ``ref`` names: pinned, the latest (at least ``min_version``), or the latest.
        :class:`NotFound` if there is no such version."""
        latest = await self.latest(ref.subject)
        if ref.version is not None:
            if ref.version == latest.version:
                return latest
            if ref.version > latest.version:
                raise NotFound(
                    f"schema subject {ref.subject!r} has no version {ref.version} (latest is {latest.version})"
                )
            return await self.get(latest.schema_id, ref.version)
        if ref.min_version is not None and latest.version < ref.min_version:
            raise NotFound(
                f"schema subject {ref.subject!r} has no version >= {ref.min_version} "
                f"(latest is {latest.version}): register a newer one first"
            )
        return latest

    async def decode(self, msg: Message[Any]) -> Any:
        """The value of a received message by the schema id and version it carries (the
        writer's schema), fetched once per (id, version) and cached: a dict/list/... for JSON
        and Avro, a dict (protobuf JSON mapping, field names as declared) for Protobuf, ``str``
        for ``string``; the payload bytes for ``bytes``, ``number`` and messages without a
        schema id. :class:`InvalidPayload` if the payload does not decode."""
        if msg.schema_id is None:
            return msg.payload
        key = (msg.schema_id, msg.schema_version or 0)
        decoder = self._decoders.get(key)
        if decoder is None:
            info = await self.get(msg.schema_id, msg.schema_version)
            decoder = decoder_for(info)
            self._decoders[key] = decoder
            while len(self._decoders) > _DECODERS_KEPT:
                self._decoders.popitem(last=False)
        else:
            self._decoders.move_to_end(key)
        return decoder(msg.payload)

    async def bind_producer(self, schema: Schema[Any] | SchemaReference) -> ProducerSchema:
        """What a producer with ``schema`` sends: a typed schema with ``register=True`` is
        registered (idempotent) and that version pinned; otherwise its reference (or the given
        :class:`SchemaReference`) is resolved to one version. A typed schema must match the
        subject's type (:class:`InvalidSchema` otherwise)."""
        if isinstance(schema, Schema) and schema.register:
            reg = await self.register(
                schema.subject, schema.schema_type, schema.definition(), created_by="danube-sdk"
            )
            return ProducerSchema(schema.subject, reg.schema_id, reg.version)
        ref = schema.reference if isinstance(schema, Schema) else schema
        info = await self.resolve(ref)
        if isinstance(schema, Schema) and schema_type_of(info.schema_type) != schema.schema_type:
            raise InvalidSchema(
                f"schema subject {ref.subject!r} holds {info.schema_type} schemas; "
                f"{type(schema).__name__} encodes {schema.schema_type}"
            )
        return ProducerSchema(ref.subject, info.schema_id, info.version)


@dataclass(frozen=True, slots=True)
class ProducerSchema:
    """The one version a producer uses: sent as ``ProducerRequest.schema_ref`` (pinned to it)
    and stamped as ``schema_id``/``schema_version`` on every message."""

    subject: str
    schema_id: int
    version: int

    def to_proto(self) -> pb.SchemaReference:
        return pb.SchemaReference(subject=self.subject, pinned_version=self.version)


def decoder_for(info: SchemaInfo) -> Callable[[bytes], Any]:
    """A function decoding payloads written with ``info`` (see :meth:`SchemaRegistryClient.decode`)."""
    kind = schema_type_of(info.schema_type)
    what = f"{info.schema_type} schema {info.subject!r} version {info.version}"
    if kind == "json_schema":

        def from_json(payload: bytes) -> Any:
            try:
                return json.loads(payload)
            except ValueError as exc:
                raise InvalidPayload(f"payload is not the JSON of {what}: {exc}") from exc

        return from_json
    if kind == "avro":
        import fastavro

        parsed = fastavro.parse_schema(json.loads(info.definition))
        return lambda payload: decode_avro(parsed, payload, what=what)
    if kind == "protobuf":
        from google.protobuf import json_format, message_factory

        from danube_common.schema import compile_schema
        from danube_common.schema.protobuf import ProtobufSchema as CompiledProtobuf

        compiled = compile_schema("protobuf", info.definition)
        assert isinstance(compiled, CompiledProtobuf)
        cls = message_factory.GetMessageClass(compiled.descriptor)

        def from_proto(payload: bytes) -> Any:
            try:
                return json_format.MessageToDict(cls.FromString(payload), preserving_proto_field_name=True)
            except Exception as exc:  # DecodeError
                raise InvalidPayload(
                    f"payload is not a {compiled.message_name} message ({what}): {exc}"
                ) from exc

        return from_proto
    if kind == "string":

        def from_text(payload: bytes) -> Any:
            try:
                return payload.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidPayload(f"payload is not the UTF-8 text of {what}: {exc}") from exc

        return from_text
    return bytes


def encoder_for(info: SchemaInfo) -> Callable[[bytes], bytes]:
    """A function from a message given as JSON text to the payload ``info`` describes (what
    ``danube-cli produce`` sends): ``json_schema`` checks the JSON against the schema and sends it
    as given; ``avro`` writes the JSON value as one binary datum; ``protobuf`` parses the protobuf
    JSON mapping into the schema's message; ``string`` and ``bytes`` send the text as is.
    :class:`InvalidPayload` says why a message does not fit; ``number`` is refused (its byte
    order is not fixed by Danube, so the CLI cannot choose one)."""
    kind = schema_type_of(info.schema_type)
    what = f"{info.schema_type} schema {info.subject!r} version {info.version}"

    def load(text: bytes) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise InvalidPayload(f"the message is not JSON ({exc}); {what} takes JSON text") from exc

    if kind == "json_schema":
        from danube_common.schema import compile_schema

        compiled = compile_schema("json_schema", info.definition)

        def to_json(text: bytes) -> bytes:
            load(text)
            reason = compiled.validate(text)
            if reason is not None:
                raise InvalidPayload(f"the message does not match {what}: {reason}")
            return text

        return to_json
    if kind == "avro":
        from danube_sdk.schemas import AvroSchema

        avro = AvroSchema(json.loads(info.definition), subject=info.subject)
        return lambda text: avro.encode(load(text))
    if kind == "protobuf":
        from google.protobuf import json_format, message_factory

        from danube_common.schema import compile_schema
        from danube_common.schema.protobuf import ProtobufSchema as CompiledProtobuf

        compiled_pb = compile_schema("protobuf", info.definition)
        assert isinstance(compiled_pb, CompiledProtobuf)
        cls = message_factory.GetMessageClass(compiled_pb.descriptor)

        def to_proto(text: bytes) -> bytes:
            try:
                return bytes(json_format.Parse(text, cls()).SerializeToString())
            except json_format.ParseError as exc:
                raise InvalidPayload(
                    f"the message does not fit {what} ({compiled_pb.message_name}): {exc}"
                ) from exc

        return to_proto
    if kind == "number":

        def refuse(text: bytes) -> bytes:
            raise InvalidPayload(
                f"{what} is a number schema: danube-cli cannot choose its byte order; send 4 or 8 bytes "
                "with -f FILE and no schema, or use a json_schema/avro subject"
            )

        return refuse
    return bytes
