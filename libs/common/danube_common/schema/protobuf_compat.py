"""Protobuf compatibility: wire compatibility of two message types, field by field number.

Upstream Danube lets every Protobuf change pass; these are the protobuf documentation's
"updating a message type" rules. ``backward`` checks that the new message type can parse data
written with the old one (reader = new, writer = old), ``forward`` the reverse; the evolution rule
on removed fields applies in every mode but ``none``.

Reading rules (reader R, writer W; fields matched by **number**, names do not matter on the wire):

- A field only W has is an unknown field to R: fine (see the evolution rule). A field only R has is
  absent from W's data: fine, unless R declares it ``required`` (proto2).
- ``required`` in R needs ``required`` in W: an optional or missing writer field can be absent.
- Singular and repeated do not mix (a singular reader keeps only the last element; packed scalars
  do not parse as singular).
- Types must be wire-compatible: ``int32``/``uint32``/``int64``/``uint64``/``bool``/enums are one
  group (varint), ``sint32``/``sint64`` one (zigzag), ``fixed32``/``sfixed32`` one, and
  ``fixed64``/``sfixed64`` one; ``float``, ``double`` and groups stand alone. R ``bytes`` reads W
  ``string`` and W messages; R ``string`` does not read W ``bytes`` (it may not be UTF-8), and an R
  message does not read W ``string``/``bytes``. Message fields are compared recursively, whatever
  their type names (renaming a message type is wire-compatible). A closed (proto2) enum in R must
  have every value of W's enum.
- ``oneof``: two fields that share a oneof in R must share one in W (else W may set both and R
  keeps one). Moving a single field into a new oneof is therefore fine.

Evolution rule (new N against old O): a field of O whose number N no longer has must be
**reserved** in N by number *and* by name; and N may not use a number or name that O reserved.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor

_T = FieldDescriptor
_GROUPS: dict[int, str] = {
    **dict.fromkeys(
        (_T.TYPE_INT32, _T.TYPE_UINT32, _T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_BOOL, _T.TYPE_ENUM), "varint"
    ),
    **dict.fromkeys((_T.TYPE_SINT32, _T.TYPE_SINT64), "zigzag"),
    **dict.fromkeys((_T.TYPE_FIXED32, _T.TYPE_SFIXED32), "fixed32"),
    **dict.fromkeys((_T.TYPE_FIXED64, _T.TYPE_SFIXED64), "fixed64"),
    _T.TYPE_FLOAT: "float",
    _T.TYPE_DOUBLE: "double",
    _T.TYPE_GROUP: "group",
}
_TYPE_NAMES = {getattr(_T, n): n.removeprefix("TYPE_").lower() for n in dir(_T) if n.startswith("TYPE_")}


def _type_name(f: FieldDescriptor) -> str:
    if f.type == _T.TYPE_MESSAGE:
        return f"message {f.message_type.full_name}"
    if f.type == _T.TYPE_ENUM:
        return f"enum {f.enum_type.full_name}"
    return _TYPE_NAMES[f.type]


def _label(f: FieldDescriptor) -> str:
    return "repeated" if f.is_repeated else "singular"


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self._active: set[tuple[str, str]] = set()

    def _err(self, where: str, msg: str) -> None:
        self.errors.append(f"{where}: {msg}")

    def read(self, reader: Descriptor, writer: Descriptor) -> None:
        key = (reader.full_name, writer.full_name)
        if key in self._active:
            return
        self._active.add(key)
        try:
            self._read(reader, writer)
        finally:
            self._active.discard(key)

    def _read(self, reader: Descriptor, writer: Descriptor) -> None:
        where = reader.full_name
        for num, rf in sorted(reader.fields_by_number.items()):
            wf = writer.fields_by_number.get(num)
            if rf.is_required and (wf is None or not wf.is_required):
                state = "absent from" if wf is None else "optional in"
                self._err(where, f"required field {num} '{rf.name}' is {state} the writer's schema")
            if wf is None:
                continue
            fw = f"{where} field {num} '{rf.name}'"
            if rf.is_repeated != wf.is_repeated:
                self._err(fw, f"changed from {_label(wf)} to {_label(rf)}")
                continue
            self._field_type(fw, rf, wf)
        for oneof in reader.oneofs:
            nums = sorted(f.number for f in oneof.fields if f.number in writer.fields_by_number)
            for i, a in enumerate(nums):
                for b in nums[i + 1 :]:
                    wa, wb = (
                        writer.fields_by_number[a].containing_oneof,
                        writer.fields_by_number[b].containing_oneof,
                    )
                    if wa is None or wb is None or wa.name != wb.name:
                        self._err(
                            where,
                            f"fields {a} and {b} share oneof '{oneof.name}' in the reader but not in the writer, "
                            "which may set both",
                        )

    def _field_type(self, fw: str, rf: FieldDescriptor, wf: FieldDescriptor) -> None:
        rt, wt = rf.type, wf.type
        if rt == _T.TYPE_MESSAGE and wt == _T.TYPE_MESSAGE:
            self.read(rf.message_type, wf.message_type)
            return
        if rt == _T.TYPE_BYTES and wt in (_T.TYPE_BYTES, _T.TYPE_STRING, _T.TYPE_MESSAGE):
            return
        if rt == _T.TYPE_STRING and wt == _T.TYPE_STRING:
            return
        rg, wg = _GROUPS.get(rt), _GROUPS.get(wt)
        if rg is None or rg != wg:
            self._err(
                fw, f"type changed from {_type_name(wf)} to {_type_name(rf)}, which is not wire-compatible"
            )
            return
        if rt == _T.TYPE_ENUM and wt == _T.TYPE_ENUM and rf.enum_type.is_closed:
            missing = sorted(set(wf.enum_type.values_by_number) - set(rf.enum_type.values_by_number))
            if missing:
                self._err(fw, f"the reader's closed enum {rf.enum_type.full_name} lacks values {missing}")

    def evolve(self, new: Descriptor, old: Descriptor) -> None:
        key = (new.full_name, old.full_name)
        if key in self._active:
            return
        self._active.add(key)
        try:
            self._evolve(new, old)
        finally:
            self._active.discard(key)

    def _evolve(self, new: Descriptor, old: Descriptor) -> None:
        where = new.full_name
        new_ranges, new_names = _reserved(new)
        old_ranges, old_names = _reserved(old)
        for num, of in sorted(old.fields_by_number.items()):
            nf = new.fields_by_number.get(num)
            if nf is None:
                if not any(lo <= num < hi for lo, hi in new_ranges):
                    self._err(where, f"field {num} '{of.name}' was removed without reserving its number")
                if of.name not in new_names and of.name not in new.fields_by_name:
                    self._err(where, f"field {num} '{of.name}' was removed without reserving its name")
            elif nf.type == _T.TYPE_MESSAGE and of.type == _T.TYPE_MESSAGE:
                self.evolve(nf.message_type, of.message_type)
        for num, nf in sorted(new.fields_by_number.items()):
            if any(lo <= num < hi for lo, hi in old_ranges):
                self._err(where, f"field {num} '{nf.name}' reuses a number reserved in the old schema")
            if nf.name in old_names:
                self._err(where, f"field {num} '{nf.name}' reuses a name reserved in the old schema")


def _reserved(desc: Descriptor) -> tuple[list[tuple[int, int]], set[str]]:
    proto = descriptor_pb2.DescriptorProto()
    desc.CopyToProto(proto)
    return [(r.start, r.end) for r in proto.reserved_range], set(proto.reserved_name)


def protobuf_read_errors(reader: Descriptor, writer: Descriptor) -> list[str]:
    """Why ``reader`` may fail on (or lose) data written with ``writer`` (empty: it will not)."""
    checker = _Checker()
    checker.read(reader, writer)
    return list(dict.fromkeys(checker.errors))


def protobuf_evolution_errors(new: Descriptor, old: Descriptor) -> list[str]:
    """Fields removed from ``old`` without being reserved in ``new``, and reserved ones reused."""
    checker = _Checker()
    checker.evolve(new, old)
    return list(dict.fromkeys(checker.errors))
