"""Typed schemas for producers and consumers: a schema definition plus an encoder and a decoder.

Pure (no network): each schema knows its registry subject, the definition it registers and how
to turn a value into a payload and back. The producer registers or resolves the subject through
the registry (:mod:`danube_sdk.schema_registry`); these classes only encode and decode.

- :class:`JsonSchema`: pydantic models (definition from ``model_json_schema()``), dataclasses and
  any other type pydantic's ``TypeAdapter`` handles (definition from ``TypeAdapter.json_schema()``),
  or a JSON Schema document (values are plain JSON values). Payloads are UTF-8 JSON.
- :class:`AvroSchema`: an Avro schema (dict or JSON text); values are what fastavro writes and
  reads (dicts for records). Payloads are one datum in Avro binary encoding, no header
  (``fastavro.schemaless_writer``), which is what the broker validates.
- :class:`ProtobufSchema`: a generated message class. The definition is a serialized
  ``FileDescriptorSet`` of the class's file and everything it imports (dependencies first, the
  class's file last). The registry takes the *first top-level message of the last file* as the
  record type, so the SDK lists the class first among its file's messages in the set it
  registers (reordering messages does not change names or the wire format). A nested message
  type (``Outer.Inner``) cannot be the record type: it is refused.

How a producer uses the subject (``register``, ``version``, ``min_version``):

- ``register=True`` (the default): register the definition under ``subject`` (idempotent: an
  identical definition gets its existing version back; a new one must pass the subject's
  compatibility mode) and pin the version the registry answers.
- ``register=False``: use what is registered: ``version=N`` (pinned), ``min_version=N`` (the
  latest, which must be at least N), or neither (the latest when the producer is created).
"""

from __future__ import annotations

import dataclasses
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast, overload

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message as ProtoMessage

from danube_common.errors import InvalidArgument, InvalidPayload, InvalidSchema

# pydantic, fastavro and danube_common.schema (jsonschema, protoc) are imported where they are
# used: importing the SDK stays cheap for applications without schemas.

T = TypeVar("T")
M = TypeVar("M", bound=ProtoMessage)


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaReference:
    """A registry subject and which of its versions to use: ``version`` (pinned),
    ``min_version`` (the latest, at least this), or neither (the latest)."""

    subject: str
    version: int | None = None
    min_version: int | None = None

    def __post_init__(self) -> None:
        if not self.subject:
            raise InvalidArgument("a schema reference needs a subject")
        if self.version is not None and self.min_version is not None:
            raise InvalidArgument("give version (pinned) or min_version, not both")
        for name, value in (("version", self.version), ("min_version", self.min_version)):
            if value is not None and value < 1:
                raise InvalidArgument(f"{name} must be 1 or more (versions start at 1), got {value}")

    def describe(self) -> str:
        if self.version is not None:
            return f"{self.subject!r} version {self.version}"
        if self.min_version is not None:
            return f"{self.subject!r} (latest, at least version {self.min_version})"
        return f"{self.subject!r} (latest)"


class Schema(ABC, Generic[T]):
    """A typed schema: registry subject, definition, and the codec of its values."""

    #: The registry's schema type (wire string): ``json_schema``, ``avro`` or ``protobuf``.
    schema_type: str

    def __init__(
        self,
        *,
        subject: str,
        register: bool = True,
        version: int | None = None,
        min_version: int | None = None,
    ) -> None:
        if register and (version is not None or min_version is not None):
            raise InvalidArgument(
                "version/min_version select an already registered version: pass register=False with them "
                "(register=True registers this definition and pins the version the registry answers)"
            )
        #: The subject this schema is registered under.
        self.subject = subject
        #: Register the definition when a producer is created (else reference ``self.reference``).
        self.register = register
        self.reference = SchemaReference(subject, version, min_version)

    @abstractmethod
    def definition(self) -> bytes:
        """The definition registered for this schema (bytes of ``RegisterSchemaRequest``)."""

    @abstractmethod
    def encode(self, value: T) -> bytes:
        """The payload of ``value``; raises :class:`InvalidPayload` if it does not fit the schema."""

    @abstractmethod
    def decode(self, payload: bytes) -> T:
        """The value of ``payload``; raises :class:`InvalidPayload` if it does not decode."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(subject={self.subject!r}, type={self.schema_type})"


# ---------------------------------------------------------------------------- JSON


class JsonSchema(Schema[T]):
    """JSON values of a pydantic model, a dataclass (any type pydantic's ``TypeAdapter`` takes),
    or a JSON Schema document given as a dict (values are then plain JSON values).

    ``validate=True`` checks every encoded payload against the definition before it is sent,
    as the broker would (the jsonschema library; costs a validation per message). Models
    validate their values already when they are built; dataclasses and plain values do not.
    """

    schema_type = "json_schema"

    @overload
    def __init__(
        self: JsonSchema[Any],
        model: Mapping[str, Any],
        *,
        subject: str,
        register: bool = True,
        version: int | None = None,
        min_version: int | None = None,
        validate: bool = False,
    ) -> None: ...

    @overload
    def __init__(
        self,
        model: type[T],
        *,
        subject: str,
        register: bool = True,
        version: int | None = None,
        min_version: int | None = None,
        validate: bool = False,
    ) -> None: ...

    def __init__(
        self,
        model: type[T] | Mapping[str, Any],
        *,
        subject: str,
        register: bool = True,
        version: int | None = None,
        min_version: int | None = None,
        validate: bool = False,
    ) -> None:
        super().__init__(subject=subject, register=register, version=version, min_version=min_version)
        import pydantic

        self.model: Any = model
        self._adapter: Any = None
        self._pydantic_model: Any = None
        if isinstance(model, Mapping):
            document: Any = dict(model)
        elif isinstance(model, type) and issubclass(model, pydantic.BaseModel):
            self._pydantic_model = model
            document = model.model_json_schema()
        else:
            try:
                self._adapter = pydantic.TypeAdapter(model)
                document = self._adapter.json_schema()
            except pydantic.PydanticUserError as exc:
                raise InvalidSchema(f"cannot derive a JSON Schema from {model!r}: {exc}") from exc
        #: The JSON Schema document registered.
        self.document: Any = document
        self._definition = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        self._check: Any = None
        if validate:
            from danube_common.schema import compile_schema

            self._check = compile_schema("json_schema", self._definition)

    def definition(self) -> bytes:
        return self._definition

    def encode(self, value: T) -> bytes:
        from pydantic_core import PydanticSerializationError

        try:
            if self._pydantic_model is not None:
                if not isinstance(value, self._pydantic_model):
                    raise InvalidPayload(
                        f"expected a {self._pydantic_model.__name__} for schema subject {self.subject!r}, "
                        f"got {type(value).__name__}"
                    )
                payload = cast(Any, value).model_dump_json().encode()
            elif self._adapter is not None:
                payload = bytes(self._adapter.dump_json(value))
            else:
                payload = json.dumps(
                    value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
                ).encode()
        except (TypeError, ValueError, PydanticSerializationError) as exc:
            raise InvalidPayload(
                f"cannot encode {type(value).__name__} as JSON for {self.subject!r}: {exc}"
            ) from exc
        if self._check is not None:
            reason = self._check.validate(payload)
            if reason is not None:
                raise InvalidPayload(f"value does not match JSON schema subject {self.subject!r}: {reason}")
        return payload

    def decode(self, payload: bytes) -> T:
        import pydantic

        try:
            if self._pydantic_model is not None:
                return cast(T, self._pydantic_model.model_validate_json(payload))
            if self._adapter is not None:
                return cast(T, self._adapter.validate_json(payload))
            return cast(T, json.loads(payload))
        except (ValueError, pydantic.ValidationError) as exc:  # JSONDecodeError is a ValueError
            raise InvalidPayload(
                f"payload does not decode as JSON schema subject {self.subject!r}: {exc}"
            ) from exc


# ---------------------------------------------------------------------------- Avro


class AvroSchema(Schema[Any]):
    """Values of an Avro schema (given as a dict or as JSON text): dicts for records, as
    fastavro reads and writes them. One datum per payload, binary encoding, no header.

    Decoding uses this schema as the writer's schema: a message written with another version
    of the subject decodes correctly only if that version has the same binary layout. Decode
    such messages with ``await client.schemas().decode(msg)``, which uses the writer's version.
    """

    schema_type = "avro"

    def __init__(
        self,
        schema: Mapping[str, Any] | str,
        *,
        subject: str,
        register: bool = True,
        version: int | None = None,
        min_version: int | None = None,
    ) -> None:
        super().__init__(subject=subject, register=register, version=version, min_version=min_version)
        import fastavro

        try:
            document = json.loads(schema) if isinstance(schema, str) else dict(schema)
            self.parsed: Any = fastavro.parse_schema(document)
        except (ValueError, TypeError, fastavro.schema.SchemaParseException) as exc:
            raise InvalidSchema(f"invalid Avro schema for subject {subject!r}: {exc}") from exc
        #: The Avro schema registered (JSON value).
        self.document: Any = document
        self._definition = json.dumps(document, separators=(",", ":")).encode()

    def definition(self) -> bytes:
        return self._definition

    def encode(self, value: Any) -> bytes:
        from fastavro.write import schemaless_writer

        buf = io.BytesIO()
        try:
            schemaless_writer(buf, self.parsed, value)
        except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, AttributeError ...
            raise InvalidPayload(
                f"value does not match Avro schema subject {self.subject!r}: {_avro_reason(self.parsed, value, exc)}"
            ) from exc
        return buf.getvalue()

    def decode(self, payload: bytes) -> Any:
        return decode_avro(self.parsed, payload, what=f"Avro schema subject {self.subject!r}")


def _avro_reason(parsed: Any, value: Any, exc: Exception) -> str:
    """fastavro's validator names the field that does not fit; the writer's own error often does not."""
    from fastavro.validation import validate as avro_validate

    try:
        avro_validate(value, parsed, raise_errors=True)
    except Exception as verr:  # ValidationError(errors=[...]) names each field that does not fit
        errors = getattr(verr, "errors", None)
        return "; ".join(str(e) for e in errors) if errors else str(verr)
    return f"{type(exc).__name__}: {exc}"


def decode_avro(parsed: Any, payload: bytes, *, what: str) -> Any:
    """One datum of ``parsed`` (fastavro's parsed schema), refusing trailing bytes."""
    from fastavro.read import schemaless_reader

    buf = io.BytesIO(payload)
    try:
        value = schemaless_reader(buf, parsed, None)
    except Exception as exc:  # EOFError, ValueError, UnicodeDecodeError ...
        raise InvalidPayload(f"payload does not decode as {what}: {type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(payload):
        raise InvalidPayload(
            f"payload does not decode as {what}: {len(payload) - buf.tell()} bytes left after the datum"
        )
    return value


# ---------------------------------------------------------------------------- Protobuf


class ProtobufSchema(Schema[M]):
    """Messages of a generated protobuf class (``order_pb2.Order``)."""

    schema_type = "protobuf"

    def __init__(
        self,
        message_cls: type[M],
        *,
        subject: str,
        register: bool = True,
        version: int | None = None,
        min_version: int | None = None,
    ) -> None:
        super().__init__(subject=subject, register=register, version=version, min_version=min_version)
        self.message_cls = message_cls
        self._definition = descriptor_set_of(message_cls)

    def definition(self) -> bytes:
        return self._definition

    def encode(self, value: M) -> bytes:
        if not isinstance(value, self.message_cls):
            raise InvalidPayload(
                f"expected a {self.message_cls.DESCRIPTOR.full_name} message for schema subject "
                f"{self.subject!r}, got {type(value).__name__}"
            )
        try:
            return value.SerializeToString()
        except Exception as exc:  # EncodeError: proto2 required fields missing
            raise InvalidPayload(f"cannot encode {self.message_cls.DESCRIPTOR.full_name}: {exc}") from exc

    def decode(self, payload: bytes) -> M:
        try:
            return self.message_cls.FromString(payload)
        except Exception as exc:  # DecodeError
            raise InvalidPayload(
                f"payload does not decode as {self.message_cls.DESCRIPTOR.full_name}: {exc}"
            ) from exc


def descriptor_set_of(message_cls: type[ProtoMessage]) -> bytes:
    """A serialized ``FileDescriptorSet``: the files ``message_cls``'s file imports (transitively,
    dependencies first), then its own file last, with ``message_cls`` listed first among that
    file's top-level messages (the registry's record type)."""
    desc = message_cls.DESCRIPTOR
    if desc.containing_type is not None:
        raise InvalidSchema(
            f"{desc.full_name} is a nested message: the registry's record type is a top-level message; "
            f"move it to the top level of {desc.file.name}"
        )
    files: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def visit(fd: FileDescriptor) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            visit(dep)
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        fdp.ClearField("source_code_info")
        files.append(fdp)

    visit(desc.file)
    main = files[-1]
    ordered = sorted(main.message_type, key=lambda m: m.name != desc.name)  # stable: the rest keep order
    main.ClearField("message_type")
    main.message_type.extend(ordered)
    return descriptor_pb2.FileDescriptorSet(file=files).SerializeToString(deterministic=True)
