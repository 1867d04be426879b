"""Avro compatibility by Avro's schema resolution rules: can a *reader* schema decode every datum
written with a *writer* schema?

``backward`` asks it with reader = new, writer = old; ``forward`` with reader = old, writer = new.
The rules are those of the Avro specification's "Schema Resolution" section, checked over the two
parsed schemas (not by trying data):

- Primitives resolve when equal, or by promotion of the writer's type: ``int`` to ``long``,
  ``float`` or ``double``; ``long`` to ``float`` or ``double``; ``float`` to ``double``; ``string`` to
  ``bytes`` and ``bytes`` to ``string``. Anything else (e.g. ``long`` to ``int``) is an error.
- Records resolve when their unqualified names are equal (or the writer's name is one of the
  reader's ``aliases``). Fields match by name (or a reader field's aliases). A writer field the reader
  lacks is skipped; a reader field the writer lacks must have a ``default``, else it is an error. Matched
  fields resolve recursively.
- Enums: names as records; every writer symbol must be a reader symbol unless the reader declares
  an enum ``default``.
- Fixed: names as records and equal ``size``.
- Arrays resolve by their ``items``, maps by their ``values``, recursively.
- Unions: when the writer is a union each of its branches must resolve against the reader (the
  whole reader when it is not a union, else its first matching branch); when only the reader is a
  union, the writer must match one of its branches (an exact kind first, then a promotion).
- A named type referenced recursively is checked once per (reader, writer) pair.
- Logical types do not change resolution: the underlying type decides.
"""

from __future__ import annotations

from typing import Any

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed"})
_COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})
#: Writer type -> reader types it is promoted to.
_PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Resolver:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.named = {"r": reader_named, "w": writer_named}
        self.errors: list[str] = []
        self._active: set[tuple[str, str]] = set()

    def _node(self, side: str, schema: Any) -> tuple[str, Any]:
        """(kind, definition) with named references followed and logical types dropped."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return schema, None
            return self._node(side, self.named[side][schema])
        if isinstance(schema, list):
            return "union", schema
        kind = schema["type"]
        if isinstance(kind, dict | list):
            return self._node(side, kind)
        if kind in _PRIMITIVES:
            return kind, None
        if kind in _COMPLEX:
            return ("record" if kind == "error" else kind), schema
        return self._node(side, kind)  # {"type": "SomeNamedType"}

    def _describe(self, kind: str, node: Any) -> str:
        return f"{kind} {node['name']!r}" if kind in _NAMED else kind

    def _name_matches(self, rnode: dict[str, Any], wnode: dict[str, Any]) -> bool:
        wname = wnode["name"]
        aliases = {_short(a) for a in rnode.get("aliases", [])} | set(rnode.get("aliases", []))
        return _short(rnode["name"]) == _short(wname) or wname in aliases or _short(wname) in aliases

    def _matches(self, rkind: str, rnode: Any, wkind: str, wnode: Any, *, promote: bool) -> bool:
        """The spec's shallow "match" used to pick a reader union branch."""
        if rkind == wkind:
            return rkind not in _NAMED or self._name_matches(rnode, wnode)
        return promote and rkind in _PROMOTIONS.get(wkind, ())

    def check(self, reader: Any, writer: Any, path: str) -> None:
        rkind, rnode = self._node("r", reader)
        wkind, wnode = self._node("w", writer)
        if wkind == "union":
            for i, branch in enumerate(wnode):
                self.check(reader, branch, f"{path}<{i}>")
            return
        if rkind == "union":
            branches = [(b, *self._node("r", b)) for b in rnode]
            for promote in (False, True):
                for branch, bkind, bnode in branches:
                    if self._matches(bkind, bnode, wkind, wnode, promote=promote):
                        self.check(branch, writer, path)
                        return
            self._err(
                path, f"the reader's union has no branch for the writer's {self._describe(wkind, wnode)}"
            )
            return
        if rkind != wkind:
            if rkind not in _PROMOTIONS.get(wkind, ()):
                self._err(
                    path,
                    f"type changed: the writer writes {self._describe(wkind, wnode)}, "
                    f"the reader expects {self._describe(rkind, rnode)}",
                )
            return
        if rkind in _NAMED:
            if not self._name_matches(rnode, wnode):
                self._err(
                    path, f"{rkind} name changed from {wnode['name']!r} to {rnode['name']!r} (add an alias)"
                )
                return
            key = (rnode["name"], wnode["name"])
            if key in self._active:
                return
            self._active.add(key)
            try:
                getattr(self, f"_{rkind}")(rnode, wnode, f"{path}/{_short(rnode['name'])}")
            finally:
                self._active.discard(key)
        elif rkind == "array":
            self.check(rnode["items"], wnode["items"], f"{path}[]")
        elif rkind == "map":
            self.check(rnode["values"], wnode["values"], f"{path}{{}}")

    def _record(self, rnode: dict[str, Any], wnode: dict[str, Any], path: str) -> None:
        wfields = {f["name"]: f for f in wnode["fields"]}
        for field in rnode["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            wfield = next((wfields[n] for n in names if n in wfields), None)
            if wfield is not None:
                self.check(field["type"], wfield["type"], f"{path}.{field['name']}")
            elif "default" not in field:
                self._err(
                    path, f"field '{field['name']}' has no default and the writer's data does not have it"
                )

    def _enum(self, rnode: dict[str, Any], wnode: dict[str, Any], path: str) -> None:
        missing = [s for s in wnode["symbols"] if s not in set(rnode["symbols"])]
        if missing and "default" not in rnode:
            self._err(path, f"enum symbols {missing} are unknown to the reader, which has no enum default")

    def _fixed(self, rnode: dict[str, Any], wnode: dict[str, Any], path: str) -> None:
        if rnode["size"] != wnode["size"]:
            self._err(path, f"fixed size changed from {wnode['size']} to {rnode['size']}")

    def _err(self, path: str, msg: str) -> None:
        self.errors.append(f"at {path or '(root)'}: {msg}")


def avro_read_errors(
    reader: Any, reader_named: dict[str, Any], writer: Any, writer_named: dict[str, Any]
) -> list[str]:
    """Why ``reader`` cannot decode some datum written with ``writer`` (empty: it always can).

    ``reader``/``writer`` are fastavro parsed schemas; ``*_named`` their named types by full name.
    """
    resolver = _Resolver(reader_named, writer_named)
    resolver.check(reader, writer, "")
    return list(dict.fromkeys(resolver.errors))
