"""The schema registry (``danube_schema.SchemaRegistry``): protobuf <-> the schema store and cache.

Served by the lookup service on its client port (the service URL: the unmodified danube-client
calls it there through ``client.schema()``) and on its admin port. Writes go to etcd as fenced
transactions (:mod:`danube_common.schema_store`); reads are answered from the watch-fed
:class:`~danube_common.schema_view.SchemaView`, and every write waits until the cache has seen
it, so a client reads its own writes. Errors are DanubeErrors mapped to status codes by the
server's interceptor. ``created_at`` fields are Unix seconds.
"""

from __future__ import annotations

import grpc.aio

from danube_common.errors import NotFound
from danube_common.pb import SchemaRegistry_pb2 as spb
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_common.schema_store import (
    SchemaStore,
    SubjectRecord,
    TopicSchemaConfig,
    VersionRecord,
    validate_policy,
    validate_subject,
)
from danube_common.schema_view import SchemaView
from danube_common.topic_name import TopicName


def _schema_response(subject: SubjectRecord, v: VersionRecord) -> spb.GetSchemaResponse:
    return spb.GetSchemaResponse(
        schema_id=v.schema_id,
        version=v.version,
        subject=v.subject,
        schema_type=v.schema_type,
        schema_definition=v.definition,
        description=v.description,
        created_at=v.created_at_ms // 1000,
        created_by=v.created_by,
        tags=list(v.tags),
        fingerprint=v.fingerprint,
        compatibility_mode=subject.compatibility_mode,
    )


class SchemaRegistryApi(spb_grpc.SchemaRegistryServicer):
    def __init__(self, store: SchemaStore, cache: SchemaView) -> None:
        self._store = store
        self._cache = cache

    async def _seen(self, revision: int) -> None:
        if revision:
            await self._cache.wait_revision(revision)

    def _subject(self, subject: str) -> SubjectRecord:
        rec = self._cache.subjects.get(validate_subject(subject))
        if rec is None:
            raise NotFound(
                f"schema subject {subject!r} does not exist; register a schema first "
                f"(`danube-admin schemas register {subject} --schema-type ... --file ...`)"
            )
        return rec

    def _latest(self, subject: SubjectRecord) -> VersionRecord:
        latest = self._cache.latest(subject.subject)
        if latest is None:
            raise NotFound(f"schema subject {subject.subject!r} has no versions")
        return latest

    # ------------------------------------------------------------------ subjects and versions
    async def RegisterSchema(
        self, request: spb.RegisterSchemaRequest, context: grpc.aio.ServicerContext
    ) -> spb.RegisterSchemaResponse:
        reg = await self._store.register(
            request.subject,
            request.schema_type,
            request.schema_definition,
            description=request.description,
            created_by=request.created_by,
            tags=list(request.tags),
        )
        await self._seen(reg.revision)
        return spb.RegisterSchemaResponse(
            schema_id=reg.version.schema_id,
            version=reg.version.version,
            is_new_version=reg.is_new_version,
            fingerprint=reg.version.fingerprint,
        )

    async def GetSchema(
        self, request: spb.GetSchemaRequest, context: grpc.aio.ServicerContext
    ) -> spb.GetSchemaResponse:
        subject = self._cache.subject_by_id(request.schema_id)
        if subject is None:
            raise NotFound(f"no schema with id {request.schema_id}")
        if not request.HasField("version"):
            return _schema_response(subject, self._latest(subject))
        v = self._cache.version(subject.subject, request.version)
        if v is None:
            raise NotFound(
                f"schema {request.schema_id} (subject {subject.subject!r}) has no version {request.version}"
            )
        return _schema_response(subject, v)

    async def GetLatestSchema(
        self, request: spb.GetLatestSchemaRequest, context: grpc.aio.ServicerContext
    ) -> spb.GetSchemaResponse:
        subject = self._subject(request.subject)
        return _schema_response(subject, self._latest(subject))

    async def ListVersions(
        self, request: spb.ListVersionsRequest, context: grpc.aio.ServicerContext
    ) -> spb.ListVersionsResponse:
        subject = self._subject(request.subject)
        return spb.ListVersionsResponse(
            versions=[
                spb.SchemaVersionInfo(
                    version=v.version,
                    created_at=v.created_at_ms // 1000,
                    created_by=v.created_by,
                    description=v.description,
                    fingerprint=v.fingerprint,
                    schema_id=v.schema_id,
                )
                for v in self._cache.all_versions(subject.subject)
            ]
        )

    async def ListSubjects(
        self, request: spb.ListSubjectsRequest, context: grpc.aio.ServicerContext
    ) -> spb.ListSubjectsResponse:
        out = []
        for name in sorted(self._cache.subjects):
            s = self._cache.subjects[name]
            latest = self._cache.latest(name)
            out.append(
                spb.SubjectSummary(
                    subject=name,
                    schema_type=s.schema_type,
                    latest_version=latest.version if latest else 0,
                    compatibility_mode=s.compatibility_mode,
                    schema_id=s.schema_id,
                    tags=list(s.tags),
                )
            )
        return spb.ListSubjectsResponse(subjects=out)

    async def CheckCompatibility(
        self, request: spb.CheckCompatibilityRequest, context: grpc.aio.ServicerContext
    ) -> spb.CheckCompatibilityResponse:
        mode = request.compatibility_mode if request.HasField("compatibility_mode") else None
        errors = await self._store.check(
            request.subject, request.schema_type, request.new_schema_definition, mode
        )
        return spb.CheckCompatibilityResponse(is_compatible=not errors, errors=errors)

    async def DeleteSchemaVersion(
        self, request: spb.DeleteSchemaVersionRequest, context: grpc.aio.ServicerContext
    ) -> spb.DeleteSchemaVersionResponse:
        await self._seen(await self._store.delete_version(request.subject, request.version))
        return spb.DeleteSchemaVersionResponse(
            success=True, message=f"deleted version {request.version} of schema subject {request.subject!r}"
        )

    async def SetCompatibilityMode(
        self, request: spb.SetCompatibilityModeRequest, context: grpc.aio.ServicerContext
    ) -> spb.SetCompatibilityModeResponse:
        await self._seen(await self._store.set_mode(request.subject, request.compatibility_mode))
        return spb.SetCompatibilityModeResponse(
            success=True,
            message=f"schema subject {request.subject!r} is now {request.compatibility_mode}-compatible",
        )

    # ------------------------------------------------------------------ topics
    async def ConfigureTopicSchema(
        self, request: spb.ConfigureTopicSchemaRequest, context: grpc.aio.ServicerContext
    ) -> spb.ConfigureTopicSchemaResponse:
        topic = TopicName.parse(request.topic_name)
        config = TopicSchemaConfig(
            validate_subject(request.schema_subject),
            validate_policy(request.validation_policy),
            request.enable_payload_validation,
        )
        await self._seen(await self._store.configure_topic(topic, config))
        return spb.ConfigureTopicSchemaResponse(
            success=True,
            message=f"topic {topic} uses schema subject {config.subject!r} (validation {config.validation_policy}"
            + (", payloads checked)" if config.enable_payload_validation else ")"),
        )

    async def UpdateTopicValidationPolicy(
        self, request: spb.UpdateTopicValidationPolicyRequest, context: grpc.aio.ServicerContext
    ) -> spb.UpdateTopicValidationPolicyResponse:
        topic = TopicName.parse(request.topic_name)
        rev = await self._store.update_topic_policy(
            topic, request.validation_policy, request.enable_payload_validation
        )
        await self._seen(rev)
        return spb.UpdateTopicValidationPolicyResponse(
            success=True, message=f"topic {topic}: validation {validate_policy(request.validation_policy)}"
        )

    async def GetTopicSchemaConfig(
        self, request: spb.GetTopicSchemaConfigRequest, context: grpc.aio.ServicerContext
    ) -> spb.GetTopicSchemaConfigResponse:
        topic = TopicName.parse(request.topic_name)
        config = self._cache.topic(str(topic))
        if config is None:
            raise NotFound(
                f"topic {topic} has no schema (`danube-admin topics set-schema {topic} --subject ...`)"
            )
        subject = self._cache.subjects.get(config.subject)
        return spb.GetTopicSchemaConfigResponse(
            schema_subject=config.subject,
            validation_policy=config.validation_policy,
            enable_payload_validation=config.enable_payload_validation,
            schema_id=subject.schema_id if subject else 0,
        )
