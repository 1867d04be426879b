"""``json_schema``: definitions are JSON Schema documents; payloads are UTF-8 JSON documents.

Definition (at registration):

- UTF-8 JSON whose top level is an object or a boolean.
- The dialect comes from ``$schema`` (draft-04, -06, -07, 2019-09 or 2020-12); without it the
  schema is read as Draft 2020-12. Another ``$schema`` URI is refused.
- The schema must be valid against its dialect's metaschema (``jsonschema``'s ``check_schema``);
  the error names the JSON path of the bad keyword, e.g. ``at 'properties/age/minimum': 'x' is
  not of type 'number'``.
- Canonical form: the JSON with sorted keys and no whitespace, so whitespace and key order do
  not change the fingerprint.

Payload: decoded as strict JSON (no ``NaN``/``Infinity``), then validated by one validator
instance built at compile time: ``jsonschema-rs`` (compiled, about 30 times faster than the
pure-Python ``jsonschema`` on 1 KB documents) decides; only for an invalid payload does
``jsonschema`` run too, to give the reason in the same words as at registration. ``format`` is an annotation (as 2020-12 says by default), not
asserted. ``$ref`` resolves inside the document only: nothing is ever fetched over the network.
The reason given for an invalid payload is jsonschema's best match, with its JSON path.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import jsonschema_rs
from jsonschema import exceptions as js_exceptions

from danube_common.errors import InvalidSchema

from .types import CompiledSchema, SchemaType, canonical_json, fingerprint_of, load_json_definition

_DIALECTS: dict[str, Any] = {
    cls.META_SCHEMA["$schema"].rstrip("#"): cls
    for cls in (
        jsonschema.Draft4Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft201909Validator,
        jsonschema.Draft202012Validator,
    )
}


#: The compiled validator of each dialect.
_FAST: dict[Any, Any] = {
    jsonschema.Draft4Validator: jsonschema_rs.Draft4Validator,
    jsonschema.Draft6Validator: jsonschema_rs.Draft6Validator,
    jsonschema.Draft7Validator: jsonschema_rs.Draft7Validator,
    jsonschema.Draft201909Validator: jsonschema_rs.Draft201909Validator,
    jsonschema.Draft202012Validator: jsonschema_rs.Draft202012Validator,
}


def _no_fetch(uri: str) -> Any:
    raise ValueError(f"$ref {uri!r} is outside the schema: nothing is fetched")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonSchema(CompiledSchema):
    schema_type = SchemaType.JSON_SCHEMA

    def __init__(self, document: Any, validator_cls: Any) -> None:
        #: The parsed definition (read it, do not change it).
        self.document = document
        self.canonical = canonical_json(document)
        self.fingerprint = fingerprint_of(self.canonical)
        self._validator = validator_cls(document)
        try:
            self._is_valid = _FAST[validator_cls](document, retriever=_no_fetch).is_valid
        except Exception:  # a $ref the compiled validator cannot resolve here: the slow path
            self._is_valid = self._validator.is_valid

    def validate(self, payload: bytes) -> str | None:
        try:
            instance = json.loads(payload, parse_constant=_reject_constant)
        except UnicodeDecodeError as exc:
            return f"not UTF-8 JSON: {exc.reason} at byte {exc.start}"
        except ValueError as exc:  # JSONDecodeError is a ValueError
            return f"not valid JSON: {exc}"
        try:
            if self._is_valid(instance):
                return None
        except Exception as exc:  # e.g. an unresolvable $ref, met only on this payload
            return f"cannot validate: {type(exc).__name__}: {exc}"
        try:
            err = js_exceptions.best_match(self._validator.iter_errors(instance))
        except js_exceptions.ValidationError as exc:
            err = exc
        except js_exceptions.SchemaError as exc:  # pragma: no cover - checked at compile time
            return f"schema error: {exc.message}"
        except Exception as exc:  # e.g. an unresolvable $ref, met only on this payload
            return f"cannot validate: {type(exc).__name__}: {exc}"
        if err is None:  # pragma: no cover - is_valid and iter_errors agree
            return "does not match the schema"
        return f"at {err.json_path}: {err.message}"


def compile_json_schema(definition: bytes) -> JsonSchema:
    """Parse and check a JSON Schema definition; raises :class:`InvalidSchema` saying what is wrong."""
    document = load_json_definition(definition, "JSON Schema")
    if not isinstance(document, dict | bool):
        raise InvalidSchema(
            f"invalid JSON Schema definition: the top level must be an object or a boolean, "
            f"not {type(document).__name__}"
        )
    validator_cls: Any = jsonschema.Draft202012Validator
    if isinstance(document, dict) and "$schema" in document:
        uri = document["$schema"]
        validator_cls = _DIALECTS.get(uri.rstrip("#")) if isinstance(uri, str) else None
        if validator_cls is None:
            allowed = ", ".join(sorted(_DIALECTS))
            raise InvalidSchema(
                f"invalid JSON Schema definition: unsupported $schema {uri!r}: use one of {allowed}"
            )
    try:
        validator_cls.check_schema(document)
    except js_exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise InvalidSchema(f"invalid JSON Schema definition: at '{where}': {exc.message}") from exc
    return JsonSchema(document, validator_cls)
