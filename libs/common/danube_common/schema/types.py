"""The vocabulary of the schema registry: schema types, compatibility modes, and the compiled form.

Strings are Danube's wire strings (``RegisterSchemaRequest.schema_type``,
``compatibility_mode``), always written in their canonical spelling. On input, parsing is
case-insensitive and accepts upstream Danube's aliases (``json`` for ``json_schema``, ``proto`` for
``protobuf``; ``int``, ``int64``, ``float``, ``double`` for ``number``).

Compatibility modes (``none``, ``backward``, ``forward``, ``full`` on Danube's wire; the transitive
forms are this implementation's addition, spelled in the same style):

- ``backward``: consumers using the *new* schema can read data written with the old one
  (check against the latest version only); ``backward_transitive``: against every version.
- ``forward``: consumers still on the *old* schema can read data written with the new one;
  ``forward_transitive``: every existing version can read the new one.
- ``full``: both; ``full_transitive``: both, against every version.
- ``none``: no check.

Every compiled schema has a canonical form (bytes) and a fingerprint ``"sha256:<hex>"`` of it, so
two definitions that differ only in insignificant ways (JSON whitespace and key order; ``.proto``
comments and layout) get the same fingerprint and a re-registration is recognised.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from danube_common.errors import InvalidSchema


class SchemaType(StrEnum):
    BYTES = "bytes"
    STRING = "string"
    NUMBER = "number"
    JSON_SCHEMA = "json_schema"
    AVRO = "avro"
    PROTOBUF = "protobuf"


class CompatibilityMode(StrEnum):
    NONE = "none"
    BACKWARD = "backward"
    FORWARD = "forward"
    FULL = "full"
    BACKWARD_TRANSITIVE = "backward_transitive"
    FORWARD_TRANSITIVE = "forward_transitive"
    FULL_TRANSITIVE = "full_transitive"

    @property
    def transitive(self) -> bool:
        """Checked against every existing version (else only against the latest)."""
        return self.value.endswith("_transitive")

    @property
    def checks_backward(self) -> bool:
        return self in _BACKWARD_MODES

    @property
    def checks_forward(self) -> bool:
        return self in _FORWARD_MODES


_BACKWARD_MODES = frozenset(
    {
        CompatibilityMode.BACKWARD,
        CompatibilityMode.FULL,
        CompatibilityMode.BACKWARD_TRANSITIVE,
        CompatibilityMode.FULL_TRANSITIVE,
    }
)
_FORWARD_MODES = frozenset(
    {
        CompatibilityMode.FORWARD,
        CompatibilityMode.FULL,
        CompatibilityMode.FORWARD_TRANSITIVE,
        CompatibilityMode.FULL_TRANSITIVE,
    }
)

#: The mode of a subject that never had one set (as upstream Danube).
DEFAULT_COMPATIBILITY_MODE = CompatibilityMode.BACKWARD

_TYPE_ALIASES = {
    "json": SchemaType.JSON_SCHEMA,
    "proto": SchemaType.PROTOBUF,
    "int": SchemaType.NUMBER,
    "int64": SchemaType.NUMBER,
    "float": SchemaType.NUMBER,
    "double": SchemaType.NUMBER,
}


def parse_schema_type(value: str) -> SchemaType:
    """The schema type a wire string names (case-insensitive; upstream's aliases accepted)."""
    key = value.strip().lower()
    try:
        return SchemaType(key)
    except ValueError:
        pass
    alias = _TYPE_ALIASES.get(key)
    if alias is None:
        allowed = ", ".join(t.value for t in SchemaType)
        raise InvalidSchema(f"unknown schema type {value!r}: expected one of {allowed}")
    return alias


def parse_compatibility_mode(value: str) -> CompatibilityMode:
    """The compatibility mode a wire string names (case-insensitive)."""
    try:
        return CompatibilityMode(value.strip().lower())
    except ValueError:
        allowed = ", ".join(m.value for m in CompatibilityMode)
        raise InvalidSchema(f"unknown compatibility mode {value!r}: expected one of {allowed}") from None


def fingerprint_of(canonical: bytes) -> str:
    """``"sha256:<hex>"`` of a canonical form: the registry's dedup key."""
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys and no insignificant whitespace (array order is kept)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def load_json_definition(definition: bytes, what: str) -> Any:
    """Parse a JSON definition, refusing non-UTF-8 or malformed text with where it broke."""
    try:
        text = definition.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidSchema(f"invalid {what} definition: not UTF-8 text ({exc})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchema(
            f"invalid {what} definition: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from exc


@dataclass(frozen=True, slots=True)
class PayloadError:
    """One payload of a batch that did not validate: its position in the batch and why."""

    index: int
    reason: str


@dataclass(frozen=True, slots=True)
class CompatibilityResult:
    compatible: bool
    errors: tuple[str, ...] = field(default=())


class CompiledSchema(ABC):
    """A definition parsed and checked once, ready to validate payloads and to be compared.

    Built by :func:`danube_common.schema.compile_schema`; immutable and safe to share.
    """

    schema_type: SchemaType
    #: Bytes that identify the definition modulo insignificant differences.
    canonical: bytes
    #: ``"sha256:<hex>"`` of ``canonical``.
    fingerprint: str

    @abstractmethod
    def validate(self, payload: bytes) -> str | None:
        """None when ``payload`` is valid, else the reason it is not (for a person to read)."""
