"""JSON Schema compatibility: can a *reader* schema accept every document a *writer* schema accepts?

``backward`` asks it with reader = new, writer = old (consumers on the new schema read old data);
``forward`` with reader = old, writer = new. The check is structural and conservative: it reports
every rule below that it cannot prove holds, and says where (a JSON pointer) and why.

Rules (reader R, writer W, applied recursively through ``properties``, ``items`` and
``additionalProperties``):

- ``true``/``{}`` R accepts everything; a ``false`` W writes nothing; a ``false`` R accepts nothing.
- ``type``: every type W allows must be allowed by R (``integer`` is within ``number``). R with a
  type and W without one is a narrowing.
- ``enum``/``const``: when W is a finite set of values, each is validated against R. When R is
  finite and W is not, or W's values are not all in R's, the enum was narrowed.
- Objects: a property R requires must be required by W ("added required property" or "made an
  optional property required"). A property of both is checked recursively. A property of W that R
  no longer lists ("removed property") is refused when R has ``additionalProperties: false``, and
  checked against R's ``additionalProperties`` when it is a schema. A property R adds that W did not
  list is accepted when W is closed (``additionalProperties: false``), checked against W's
  ``additionalProperties`` schema when it has one, and *accepted* when W is open: the usual
  evolution (adding an optional property) is allowed even though an open W could in theory have
  written anything under that name. R closing (``additionalProperties: false``) where W was open is
  refused. ``minProperties``/``maxProperties`` may only widen.
- Arrays: ``items`` recursively; ``minItems``/``maxItems`` may only widen; R may not add
  ``uniqueItems: true``.
- Numbers: ``minimum``/``exclusiveMinimum``/``maximum``/``exclusiveMaximum`` may only widen (the
  draft-04 boolean ``exclusive*`` form is understood); R's ``multipleOf`` must divide W's.
- Strings: ``minLength``/``maxLength`` may only widen; R's ``pattern`` must be W's pattern.
- ``allOf`` in R: W must fit every branch. ``anyOf``/``oneOf`` in W: every branch must fit R.
  ``anyOf``/``oneOf`` in R: W must fit one branch (``oneOf``'s exclusivity is not checked).
  ``allOf`` in W: one of its parts (or their shallow merge) must fit R.
- ``$ref`` to the same document (``#/$defs/...``, ``#/definitions/...``) is followed; recursive
  schemas are checked once per pair.
- Annotations (``title``, ``description``, ``default``, ``examples``, ``format``, ``$comment``,
  ``deprecated``, ...) never matter. Any other keyword R has (``not``, ``if``, ``patternProperties``,
  ``dependentRequired``, ``prefixItems``, ...) must be identical in W, else compatibility cannot be
  proven and it is reported.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import jsonschema

_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$defs", "definitions", "$vocabulary",
        "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "format",
        "contentMediaType", "contentEncoding", "contentSchema",
    }
)  # fmt: skip
_HANDLED = frozenset(
    {
        "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "minLength", "maxLength", "pattern", "items", "minItems", "maxItems",
        "uniqueItems", "properties", "required", "additionalProperties", "minProperties",
        "maxProperties", "allOf", "anyOf", "oneOf", "$ref",
    }
)  # fmt: skip


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _ptr(path: str) -> str:
    return "#" + path if path else "#(root)"


class _Checker:
    def __init__(self, reader_root: Any, writer_root: Any) -> None:
        self.roots = {"r": reader_root, "w": writer_root}
        self.errors: list[str] = []
        #: Pairs being checked right now: meeting one again (a recursive schema) is taken as fine.
        self._active: set[tuple[int, int]] = set()
        #: Every schema object compared, so that an id is never reused while it is checked.
        self._keep: list[Any] = []

    # ---- helpers
    def _err(self, path: str, msg: str) -> None:
        self.errors.append(f"at {_ptr(path)}: {msg}")

    def _resolve(self, side: str, schema: Any, depth: int = 0) -> Any:
        """Follow a same-document ``$ref`` (siblings of $ref are kept as an allOf)."""
        if not isinstance(schema, dict) or "$ref" not in schema or depth > 32:
            return schema
        ref = schema["$ref"]
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            return schema  # another document or an anchor: compared verbatim in _opaque
        target: Any = self.roots[side]
        for raw in ref[2:].split("/") if ref != "#" else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return schema
        target = self._resolve(side, target, depth + 1)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        if not rest:
            return target
        return {"allOf": [target, rest]}

    def _sub(self, reader: Any, writer: Any, path: str) -> list[str]:
        """Run a check on the side, returning its errors without recording them."""
        saved = self.errors
        self.errors = []
        try:
            self.check(reader, writer, path)
            return self.errors
        finally:
            self.errors = saved

    # ---- the relation
    def check(self, reader: Any, writer: Any, path: str) -> None:
        reader = self._resolve("r", reader)
        writer = self._resolve("w", writer)
        if writer is False or reader is True:
            return
        if reader is False:
            self._err(path, "the reader accepts nothing (false) but the writer accepts data")
            return
        if writer is True:
            writer = {}
        if not isinstance(reader, dict) or not isinstance(writer, dict):
            return
        if not any(k not in _ANNOTATIONS for k in reader):
            return
        key = (id(reader), id(writer))
        if key in self._active:
            return
        self._keep += (reader, writer)
        self._active.add(key)
        try:
            self._check_dicts(reader, writer, path)
        finally:
            self._active.discard(key)

    def _check_dicts(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:

        # The writer is a union: every alternative must fit.
        for comb in ("anyOf", "oneOf"):
            if isinstance(writer.get(comb), list):
                rest = {k: v for k, v in writer.items() if k != comb}
                errs: list[str] = []
                for i, branch in enumerate(writer[comb]):
                    errs += self._sub(reader, branch, f"{path}/{comb}/{i}")
                if errs and _constrains(rest) and not self._sub(reader, rest, path):
                    return
                self.errors += errs
                return
        if isinstance(writer.get("allOf"), list):
            self._writer_all_of(reader, writer, path)
            return
        # The reader is an intersection: the writer must fit every part.
        if isinstance(reader.get("allOf"), list):
            rest = {k: v for k, v in reader.items() if k != "allOf"}
            for i, branch in enumerate(reader["allOf"]):
                self.check(branch, writer, f"{path}/allOf/{i}")
            self.check(rest, writer, path)
            return
        for comb in ("anyOf", "oneOf"):
            if isinstance(reader.get(comb), list):
                rest = {k: v for k, v in reader.items() if k != comb}
                if not any(not self._sub(b, writer, path) for b in reader[comb]):
                    self._err(path, f"the writer's data fits none of the reader's {comb} alternatives")
                self.check(rest, writer, path)
                return

        if self._finite_writer(reader, writer, path):
            return
        self._opaque(reader, writer, path)
        self._types(reader, writer, path)
        self._enum(reader, writer, path)
        self._bounds(reader, writer, path)
        self._strings(reader, writer, path)
        self._arrays(reader, writer, path)
        self._objects(reader, writer, path)

    def _writer_all_of(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        rest = {k: v for k, v in writer.items() if k != "allOf"}
        parts = [rest, *(self._resolve("w", b) for b in writer["allOf"])]
        for part in parts:
            if _constrains(part) and not self._sub(reader, part, path):
                return
        merged: dict[str, Any] = {}
        for part in parts:
            if not isinstance(part, dict):
                continue
            for k, v in part.items():
                if k == "properties" and isinstance(v, dict):
                    merged.setdefault("properties", {}).update(v)
                elif k == "required" and isinstance(v, list):
                    merged["required"] = sorted({*merged.get("required", []), *v})
                else:
                    merged.setdefault(k, v)
        self.check(reader, merged, path)

    def _finite_writer(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> bool:
        """When the writer allows a finite set of values, validate each one against the reader."""
        values = _finite(writer)
        if values is None or '"$ref"' in _dump(reader):
            return False
        cls = jsonschema.validators.validator_for(self.roots["r"], default=jsonschema.Draft202012Validator)
        validator = cls(reader)
        rejected = [v for v in values if not validator.is_valid(v)]
        if rejected:
            self._err(path, f"the reader rejects values the writer allows: {_dump(rejected)}")
        return True

    def _opaque(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        for k, v in reader.items():
            if k in _ANNOTATIONS or (k in _HANDLED and k != "$ref"):
                continue
            if k not in writer or _dump(writer[k]) != _dump(v):
                self._err(
                    path, f"cannot prove compatibility: keyword '{k}' differs between reader and writer"
                )

    def _types(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if "type" not in reader:
            return
        rtypes = _types(reader["type"])
        if "type" not in writer:
            self._err(path, f"type narrowed: the reader accepts only {sorted(rtypes)}, the writer any type")
            return
        for wt in sorted(_types(writer["type"])):
            if wt not in rtypes and not (wt == "integer" and "number" in rtypes):
                self._err(
                    path, f"type changed: the writer may write '{wt}', the reader accepts {sorted(rtypes)}"
                )

    def _enum(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        rvals = _finite(reader)
        if rvals is None:
            return
        wvals = _finite(writer)
        if wvals is None:
            self._err(path, f"enum narrowed: the reader accepts only {_dump(rvals)}, the writer any value")
            return
        allowed = {_dump(v) for v in rvals}
        missing = [v for v in wvals if _dump(v) not in allowed]
        if missing:
            self._err(path, f"enum narrowed: the reader no longer accepts {_dump(missing)}")

    def _bounds(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        for side, sign in (("minimum", 1), ("maximum", -1)):
            rb, wb = _bound(reader, side), _bound(writer, side)
            if rb is None:
                continue
            if wb is None:
                self._err(path, f"{side} added: the reader requires {side} {rb[0]}, the writer has none")
            elif sign * (rb[0] - wb[0]) > 0 or (rb[0] == wb[0] and rb[1] and not wb[1]):
                verb = "raised" if sign > 0 else "lowered"
                self._err(path, f"{side} {verb}: the reader's bound is {rb[0]}, the writer's {wb[0]}")
        if "multipleOf" in reader:
            rm, wm = reader["multipleOf"], writer.get("multipleOf")
            if wm is None or Fraction(str(wm)) % Fraction(str(rm)) != 0:
                self._err(path, f"multipleOf {rm} added or changed: the writer's is {wm}")
        for kw_min, kw_max, what in (
            ("minLength", "maxLength", "string length"),
            ("minItems", "maxItems", "array length"),
            ("minProperties", "maxProperties", "number of properties"),
        ):
            if kw_min in reader and reader[kw_min] > writer.get(kw_min, 0):
                self._err(
                    path,
                    f"{kw_min} raised: the reader needs {what} >= {reader[kw_min]}, the writer >= {writer.get(kw_min, 0)}",
                )
            if kw_max in reader and (kw_max not in writer or reader[kw_max] < writer[kw_max]):
                self._err(
                    path,
                    f"{kw_max} lowered: the reader needs {what} <= {reader[kw_max]}, the writer <= {writer.get(kw_max, 'unbounded')}",
                )

    def _strings(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
            self._err(
                path,
                f"pattern added or changed: the reader needs {reader['pattern']!r}, the writer {writer.get('pattern')!r}",
            )

    def _arrays(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
            self._err(path, "uniqueItems added: the writer may write repeated items")
        ritems = reader.get("items", True)
        if isinstance(ritems, dict | bool):
            witems = writer.get("items", True)
            if isinstance(witems, dict | bool):
                self.check(ritems, witems, f"{path}/items")
            elif _dump(ritems) != _dump(witems):
                self._err(path, "cannot prove compatibility: 'items' changed form")

    def _objects(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        rprops: dict[str, Any] = (
            reader.get("properties", {}) if isinstance(reader.get("properties"), dict) else {}
        )
        wprops: dict[str, Any] = (
            writer.get("properties", {}) if isinstance(writer.get("properties"), dict) else {}
        )
        rreq = set(reader.get("required", [])) if isinstance(reader.get("required"), list) else set()
        wreq = set(writer.get("required", [])) if isinstance(writer.get("required"), list) else set()
        for name in sorted(rreq - wreq):
            if name in wprops:
                self._err(path, f"property '{name}' is required by the reader but optional in the writer")
            else:
                self._err(
                    path, f"property '{name}' is required by the reader but the writer does not define it"
                )
        radd = reader.get("additionalProperties", True)
        wadd = writer.get("additionalProperties", True)
        for name in sorted(wprops):
            sub = f"{path}/properties/{name}"
            if name in rprops:
                self.check(rprops[name], wprops[name], sub)
            elif radd is False:
                self._err(
                    path,
                    f"property '{name}' of the writer is not allowed by the reader (additionalProperties: false)",
                )
            elif isinstance(radd, dict):
                self.check(radd, wprops[name], f"{path}/additionalProperties")
        for name in sorted(set(rprops) - set(wprops)):
            if isinstance(wadd, dict):
                self.check(rprops[name], wadd, f"{path}/properties/{name}")
        if radd is not True and wadd is not False:
            if radd is False:
                self._err(
                    path, "additionalProperties closed: the writer may write properties the reader forbids"
                )
            else:
                self.check(radd, wadd, f"{path}/additionalProperties")


def _constrains(schema: Any) -> bool:
    return isinstance(schema, dict) and any(k not in _ANNOTATIONS for k in schema)


def _finite(schema: dict[str, Any]) -> list[Any] | None:
    """The values an ``enum``/``const`` schema allows, or None when it is not finite."""
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    if "const" in schema:
        return [schema["const"]]
    return None


def _types(value: Any) -> set[str]:
    return {value} if isinstance(value, str) else {t for t in value if isinstance(t, str)}


def _bound(schema: dict[str, Any], side: str) -> tuple[float, bool] | None:
    """(value, exclusive) of the tightest lower (``minimum``) or upper (``maximum``) bound."""
    excl_kw = "exclusiveMinimum" if side == "minimum" else "exclusiveMaximum"
    incl = schema.get(side)
    excl = schema.get(excl_kw)
    if isinstance(excl, bool):  # draft-04: a flag on minimum/maximum
        return None if incl is None else (incl, excl)
    cands: list[tuple[float, bool]] = []
    if isinstance(incl, int | float):
        cands.append((incl, False))
    if isinstance(excl, int | float):
        cands.append((excl, True))
    if not cands:
        return None
    if side == "minimum":
        return max(cands, key=lambda c: (c[0], c[1]))
    return min(cands, key=lambda c: (c[0], not c[1]))


def json_read_errors(reader: Any, writer: Any) -> list[str]:
    """Why a consumer on ``reader`` may fail on data valid under ``writer`` (empty: it will not)."""
    checker = _Checker(reader, writer)
    checker.check(reader, writer, "")
    return list(dict.fromkeys(checker.errors))
