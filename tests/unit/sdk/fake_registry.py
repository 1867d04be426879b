"""An in-memory ``danube_schema.SchemaRegistry`` for SDK tests (served by the fake cluster).

Faithful where the SDK depends on it: one id per subject, versions 1..N, an identical definition
(same fingerprint) returns its existing version, a subject keeps its type, unknown subjects, ids
and versions are NOT_FOUND. Compatibility is not checked (the real registry's rules are tested
in tests/unit/common and tests/integration); ``refuse_next`` makes the next registration fail
with INCOMPATIBLE_SCHEMA.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from danube_common.errors import IncompatibleSchema, InvalidSchema, NotFound
from danube_common.pb import SchemaRegistry_pb2 as spb
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_common.schema import compile_schema, parse_schema_type


@dataclass
class _Subject:
    schema_id: int
    schema_type: str
    mode: str = "backward"
    #: version -> (definition, fingerprint)
    versions: dict[int, tuple[bytes, str]] = field(default_factory=dict)
    next_version: int = 1


class FakeRegistry(spb_grpc.SchemaRegistryServicer):
    def __init__(self) -> None:
        self.subjects: dict[str, _Subject] = {}
        self.topics: dict[str, spb.ConfigureTopicSchemaRequest] = {}
        self.calls: list[tuple[str, object]] = []
        self.refuse_next = False
        self._ids = itertools.count(1)

    def _subject(self, name: str) -> _Subject:
        s = self.subjects.get(name)
        if s is None:
            raise NotFound(f"schema subject {name!r} does not exist")
        return s

    def _response(self, name: str, version: int) -> spb.GetSchemaResponse:
        s = self.subjects[name]
        definition, fingerprint = s.versions[version]
        return spb.GetSchemaResponse(
            schema_id=s.schema_id,
            version=version,
            subject=name,
            schema_type=s.schema_type,
            schema_definition=definition,
            fingerprint=fingerprint,
            compatibility_mode=s.mode,
            created_at=1_700_000_000,
        )

    async def RegisterSchema(
        self, request: spb.RegisterSchemaRequest, context: object
    ) -> spb.RegisterSchemaResponse:
        self.calls.append(("RegisterSchema", request))
        kind = parse_schema_type(request.schema_type).value
        fingerprint = compile_schema(kind, request.schema_definition).fingerprint
        s = self.subjects.get(request.subject)
        if s is None:
            s = self.subjects[request.subject] = _Subject(next(self._ids), kind)
        elif s.schema_type != kind:
            raise InvalidSchema(f"subject {request.subject!r} holds {s.schema_type} schemas")
        for version, (_, fp) in s.versions.items():
            if fp == fingerprint:
                return spb.RegisterSchemaResponse(
                    schema_id=s.schema_id, version=version, is_new_version=False, fingerprint=fp
                )
        if self.refuse_next:
            self.refuse_next = False
            raise IncompatibleSchema(
                f"the schema is not backward-compatible with subject {request.subject!r}"
            )
        version = s.next_version
        s.next_version += 1
        s.versions[version] = (request.schema_definition, fingerprint)
        return spb.RegisterSchemaResponse(
            schema_id=s.schema_id, version=version, is_new_version=True, fingerprint=fingerprint
        )

    async def GetSchema(self, request: spb.GetSchemaRequest, context: object) -> spb.GetSchemaResponse:
        self.calls.append(("GetSchema", request))
        for name, s in self.subjects.items():
            if s.schema_id == request.schema_id:
                version = request.version if request.HasField("version") else max(s.versions)
                if version not in s.versions:
                    raise NotFound(f"schema {request.schema_id} has no version {version}")
                return self._response(name, version)
        raise NotFound(f"no schema with id {request.schema_id}")

    async def GetLatestSchema(
        self, request: spb.GetLatestSchemaRequest, context: object
    ) -> spb.GetSchemaResponse:
        self.calls.append(("GetLatestSchema", request))
        s = self._subject(request.subject)
        return self._response(request.subject, max(s.versions))

    async def ListVersions(
        self, request: spb.ListVersionsRequest, context: object
    ) -> spb.ListVersionsResponse:
        s = self._subject(request.subject)
        return spb.ListVersionsResponse(
            versions=[
                spb.SchemaVersionInfo(version=v, fingerprint=fp, schema_id=s.schema_id)
                for v, (_, fp) in sorted(s.versions.items())
            ]
        )
