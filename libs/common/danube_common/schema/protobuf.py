"""``protobuf``: definitions are a ``FileDescriptorSet`` or ``.proto`` text; payloads are one
serialized message of the schema's message type.

Definition (at registration), either:

- a serialized ``google.protobuf.FileDescriptorSet`` (``protoc --include_imports
  --descriptor_set_out=...``): dependencies first, the **last file is the main one**. A dependency
  missing from the set is taken from the protobuf runtime when it is a well-known type
  (``google/protobuf/*.proto``), else the definition is refused; or
- ``.proto`` text (UTF-8), compiled by protoc itself (``grpcio-tools``' in-process compiler, the same
  protoc that generates this project's code, so every syntax, edition and option protoc knows is
  understood, with protoc's own ``line:column`` error messages). It may import the well-known types
  only. Compiling needs a scratch directory for protoc's input file; nothing else touches the disk.

Bytes are read as a descriptor set when they parse as one with named files, else as text.

The message type: the ``message_name`` argument (a full name such as ``shop.Order``) when the caller
gives one, else the **first top-level message of the main file**. The registry's wire protocol has
no field for it, so a ``.proto`` whose record type is not its first message must be reordered.

Canonical form: the normalized descriptor set (source info and ``json_name`` cleared, deterministic
serialization) plus the message name, so comments, layout, or sending text instead of a descriptor
set do not change the fingerprint.

Payload: parsed with a message class built by ``message_factory`` from a private descriptor pool
(never the process's default pool, so schemas never clash with the generated code). Invalid wire
format, invalid UTF-8 in a proto3 ``string``, and missing proto2 ``required`` fields are refused.
Unknown fields are accepted, as protobuf parsers do.
"""

from __future__ import annotations

import ast
import importlib
import os
import tempfile
import threading
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor

from danube_common.errors import InvalidSchema

from .types import CompiledSchema, SchemaType, fingerprint_of

#: Name under which ``.proto`` text is compiled (it appears in the canonical form).
PROTO_TEXT_FILE = "schema.proto"
_WELL_KNOWN = (
    "any",
    "api",
    "duration",
    "empty",
    "field_mask",
    "source_context",
    "struct",
    "timestamp",
    "type",
    "wrappers",
)
_PROTOC_LOCK = threading.Lock()  # protoc's in-process compiler is not documented as thread-safe


class ProtobufSchema(CompiledSchema):
    schema_type = SchemaType.PROTOBUF

    def __init__(self, files: list[descriptor_pb2.FileDescriptorProto], message_name: str | None) -> None:
        #: The normalized files, dependencies first.
        self.files = _dependency_order(files)
        self.pool = descriptor_pool.DescriptorPool()
        for fdp in self.files:
            try:
                self.pool.AddSerializedFile(fdp.SerializeToString())
            except Exception as exc:  # TypeError from upb with the reason
                raise InvalidSchema(f"invalid Protobuf schema: file {fdp.name!r}: {exc}") from exc
        main = files[-1]
        self.descriptor: Descriptor = self._pick(main, message_name)
        self.message_name: str = self.descriptor.full_name
        fds = descriptor_pb2.FileDescriptorSet(file=self.files)
        self.canonical = (
            fds.SerializeToString(deterministic=True) + b"\x00message=" + self.message_name.encode()
        )
        self.fingerprint = fingerprint_of(self.canonical)
        self._cls: Any = message_factory.GetMessageClass(self.descriptor)

    def _pick(self, main: descriptor_pb2.FileDescriptorProto, message_name: str | None) -> Descriptor:
        if message_name:
            try:
                return self.pool.FindMessageTypeByName(message_name.lstrip("."))
            except KeyError:
                known = [
                    m.full_name for m in self.pool.FindFileByName(main.name).message_types_by_name.values()
                ]
                raise InvalidSchema(
                    f"invalid Protobuf schema: no message {message_name!r}; the main file defines {known}"
                ) from None
        if not main.message_type:
            raise InvalidSchema(f"invalid Protobuf schema: the main file {main.name!r} defines no message")
        prefix = f"{main.package}." if main.package else ""
        return self.pool.FindMessageTypeByName(prefix + main.message_type[0].name)

    def validate(self, payload: bytes) -> str | None:
        try:
            msg = self._cls.FromString(payload)
        except Exception as exc:  # DecodeError
            return f"not a valid {self.message_name} message: {exc}"
        if not msg.IsInitialized():
            return (
                f"{self.message_name} is missing required fields: {', '.join(msg.FindInitializationErrors())}"
            )
        return None


def compile_protobuf(definition: bytes, *, message_name: str | None = None) -> ProtobufSchema:
    """Parse and check a Protobuf definition; raises :class:`InvalidSchema` saying what is wrong."""
    files = _as_descriptor_set(definition)
    if files is None:
        try:
            text = definition.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidSchema(
                "invalid Protobuf schema: neither a serialized FileDescriptorSet nor UTF-8 .proto text"
            ) from exc
        files = _compile_text(text)
    else:
        files = _add_well_known(files)
    for fdp in files:
        _normalize(fdp)
    return ProtobufSchema(files, message_name)


def _as_descriptor_set(data: bytes) -> list[descriptor_pb2.FileDescriptorProto] | None:
    try:
        fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    except Exception:
        return None
    if not fds.file or not all(f.name for f in fds.file):
        return None
    return list(fds.file)


def _add_well_known(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    have = {f.name for f in files}
    extra: list[descriptor_pb2.FileDescriptorProto] = []
    for dep in sorted({d for f in files for d in f.dependency} - have):
        stem = dep.removeprefix("google/protobuf/").removesuffix(".proto")
        if not dep.startswith("google/protobuf/") or stem not in _WELL_KNOWN:
            raise InvalidSchema(
                f"invalid Protobuf schema: the FileDescriptorSet lacks {dep!r}, imported by one of its files "
                "(build it with protoc --include_imports)"
            )
        module = importlib.import_module(f"google.protobuf.{stem}_pb2")
        extra.append(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    return extra + files


def _compile_text(text: str) -> list[descriptor_pb2.FileDescriptorProto]:
    import grpc_tools
    from grpc_tools import _protoc_compiler

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="danube-proto-") as tmp:
        with open(os.path.join(tmp, PROTO_TEXT_FILE), "w", encoding="utf-8") as f:
            f.write(text)
        try:
            with _PROTOC_LOCK:
                generated = _protoc_compiler.get_protos(
                    PROTO_TEXT_FILE.encode(), [tmp.encode(), include.encode()]
                )
        except _protoc_compiler.ProtocErrors as exc:
            details = "; ".join(
                f"line {e.line + 1}:{e.column + 1}: {e.message.decode(errors='replace')}"
                for e in exc.errors()
            )
            raise InvalidSchema(f"invalid Protobuf schema: {details}") from exc
    files = [_descriptor_from_generated(name.decode(), code.decode()) for name, code in generated]
    main = [f for f in files if f.name == PROTO_TEXT_FILE]
    return [f for f in files if f.name != PROTO_TEXT_FILE] + main


def _descriptor_from_generated(name: str, code: str) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto protoc embedded in a generated ``_pb2`` module (never executed)."""
    for node in ast.walk(ast.parse(code)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
        ):
            return descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(node.args[0]))
    raise InvalidSchema(
        f"invalid Protobuf schema: protoc produced no descriptor for {name}"
    )  # pragma: no cover


def _normalize(fdp: descriptor_pb2.FileDescriptorProto) -> None:
    fdp.ClearField("source_code_info")

    def clear(msg: descriptor_pb2.DescriptorProto) -> None:
        for field in [*msg.field, *msg.extension]:
            field.ClearField("json_name")
        for nested in msg.nested_type:
            clear(nested)

    for msg in fdp.message_type:
        clear(msg)
    for ext in fdp.extension:
        ext.ClearField("json_name")


def _dependency_order(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    by_name = {f.name: f for f in files}
    out: list[descriptor_pb2.FileDescriptorProto] = []
    done: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in done or name not in by_name:
            return
        if name in chain:
            raise InvalidSchema(f"invalid Protobuf schema: import cycle through {name!r}")
        for dep in by_name[name].dependency:
            visit(dep, (*chain, name))
        done.add(name)
        out.append(by_name[name])

    for f in files:
        visit(f.name, ())
    return out
