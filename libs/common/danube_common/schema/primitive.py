"""The three schema types without a definition: ``bytes``, ``string`` and ``number``.

Their definition is not interpreted (it may be empty, as Danube's clients send it), so every
registration of one type has the same canonical form (the type name) and fingerprint.

Payload rules, as upstream Danube:

- ``bytes``: anything, including the empty payload.
- ``string``: valid UTF-8.
- ``number``: exactly 4 bytes (an ``int`` or a ``float``) or 8 bytes (a ``long`` or a ``double``).
  Danube fixes only the width, not the byte order nor which of the two encodings of that width a
  producer uses, so nothing more can be checked.

Compatibility between two of these is decided by type alone (see :mod:`.compat`): a subject keeps
its type.
"""

from __future__ import annotations

from .types import CompiledSchema, SchemaType, fingerprint_of

#: Payload widths a ``number`` may have: int/float and long/double.
NUMBER_WIDTHS_BYTES = (4, 8)


class _Primitive(CompiledSchema):
    def __init__(self, schema_type: SchemaType) -> None:
        self.schema_type = schema_type
        self.canonical = schema_type.value.encode()
        self.fingerprint = fingerprint_of(self.canonical)


class BytesSchema(_Primitive):
    def __init__(self) -> None:
        super().__init__(SchemaType.BYTES)

    def validate(self, payload: bytes) -> str | None:
        return None


class StringSchema(_Primitive):
    def __init__(self) -> None:
        super().__init__(SchemaType.STRING)

    def validate(self, payload: bytes) -> str | None:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"not valid UTF-8: byte 0x{payload[exc.start]:02x} at offset {exc.start}"
        return None


class NumberSchema(_Primitive):
    def __init__(self) -> None:
        super().__init__(SchemaType.NUMBER)

    def validate(self, payload: bytes) -> str | None:
        if len(payload) in NUMBER_WIDTHS_BYTES:
            return None
        return f"a number must be 4 bytes (int, float) or 8 bytes (long, double), got {len(payload)} bytes"
