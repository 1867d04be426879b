"""The schema registry's records in etcd, and every write to them as a fenced transaction.

A **subject** (e.g. ``orders``) holds the versions of one schema, all of one type. Its record
(``Keys.schema_subject``) carries the subject's **schema id** (allocated once, unique across the
cluster: a transaction on the ``next_id`` counter, never read-then-write), its compatibility mode
and the number the next version gets. Each **version** (``Keys.schema_version``) holds the
definition, its fingerprint and who registered it. Version numbers start at 1 and are never
reused, also after a version is deleted.

Writes are transactions fenced on the subject record's ``mod_revision``: two concurrent
registrations of the same subject cannot both take the same version number, and a compatibility
check always ran against the versions that are there when the write lands (a conflict re-reads and
checks again). Registering a definition identical to an existing version (same fingerprint) is
idempotent: it returns that version.

A **topic's schema** (``Keys.topic_schema``, deleted with the topic) names its subject and the
validation policy the owning broker applies (``none``, ``warn``, ``enforce``; payloads are decoded
and checked only with ``enable_payload_validation``). For a partitioned topic the configuration is
written to the parent and to every partition (brokers own partitions).

The rules themselves (what a valid definition is, fingerprints, compatibility) are
:mod:`danube_common.schema`'s; this module only stores.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from danube_common.errors import (
    FailedPrecondition,
    IncompatibleSchema,
    InvalidArgument,
    NotFound,
    TopicNotFound,
    Unavailable,
)
from danube_common.keys import Keys
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.schema import (
    DEFAULT_COMPATIBILITY_MODE,
    CompatibilityMode,
    CompileCache,
    check_compatibility,
    parse_compatibility_mode,
    parse_schema_type,
)
from danube_common.topic_name import TopicName

#: Letters, digits, '_', '-' and '.' (a subject is part of etcd keys).
_SUBJECT = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")
#: How often a write that lost a race re-reads and tries again.
_ATTEMPTS = 20
_TXN_CHUNK = 100

VALIDATION_POLICIES: tuple[str, ...] = ("none", "warn", "enforce")


def _now_ms() -> int:
    return int(time.time() * 1000)


def validate_subject(subject: str) -> str:
    if not _SUBJECT.match(subject):
        raise InvalidArgument(
            f"invalid schema subject {subject!r}: use 1-200 letters, digits, '_', '-' or '.' (e.g. orders-value)"
        )
    return subject


def validate_policy(policy: str) -> str:
    """A validation policy (empty: ``none``)."""
    policy = policy or "none"
    if policy not in VALIDATION_POLICIES:
        raise InvalidArgument(
            f"unknown validation policy {policy!r}: use one of {', '.join(VALIDATION_POLICIES)}"
        )
    return policy


@dataclass(frozen=True, slots=True)
class SubjectRecord:
    subject: str
    schema_id: int
    schema_type: str
    compatibility_mode: str
    #: The number the next registered version gets (versions are never renumbered).
    next_version: int = 1
    created_at_ms: int = 0
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_id": self.schema_id,
            "schema_type": self.schema_type,
            "compatibility_mode": self.compatibility_mode,
            "next_version": self.next_version,
            "created_at_ms": self.created_at_ms,
            "tags": list(self.tags),
        }

    @classmethod
    def from_json(cls, subject: str, d: dict[str, Any]) -> SubjectRecord:
        return cls(
            subject,
            int(d["schema_id"]),
            str(d["schema_type"]),
            str(d["compatibility_mode"]),
            int(d.get("next_version", 1)),
            int(d.get("created_at_ms", 0)),
            tuple(d.get("tags", ())),
        )


@dataclass(frozen=True, slots=True)
class VersionRecord:
    subject: str
    version: int
    schema_id: int
    schema_type: str
    definition: bytes
    fingerprint: str
    description: str = ""
    created_by: str = ""
    created_at_ms: int = 0
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_id": self.schema_id,
            "schema_type": self.schema_type,
            "definition_b64": base64.b64encode(self.definition).decode(),
            "fingerprint": self.fingerprint,
            "description": self.description,
            "created_by": self.created_by,
            "created_at_ms": self.created_at_ms,
            "tags": list(self.tags),
        }

    @classmethod
    def from_json(cls, subject: str, version: int, d: dict[str, Any]) -> VersionRecord:
        return cls(
            subject,
            version,
            int(d["schema_id"]),
            str(d["schema_type"]),
            base64.b64decode(d["definition_b64"]),
            str(d["fingerprint"]),
            str(d.get("description", "")),
            str(d.get("created_by", "")),
            int(d.get("created_at_ms", 0)),
            tuple(d.get("tags", ())),
        )


@dataclass(frozen=True, slots=True)
class TopicSchemaConfig:
    subject: str
    validation_policy: str = "none"
    enable_payload_validation: bool = False
    #: Set when a producer's schema reference bound the subject (no admin configured it).
    bound_by_producer: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "validation_policy": self.validation_policy,
            "enable_payload_validation": self.enable_payload_validation,
            "bound_by_producer": self.bound_by_producer,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicSchemaConfig:
        return cls(
            str(d["subject"]),
            str(d.get("validation_policy", "none")),
            bool(d.get("enable_payload_validation", False)),
            bool(d.get("bound_by_producer", False)),
        )


@dataclass(frozen=True, slots=True)
class Registered:
    """The outcome of :meth:`SchemaStore.register`."""

    subject: SubjectRecord
    version: VersionRecord
    is_new_version: bool
    #: The store revision of the write (0 when nothing was written): read your writes from a cache.
    revision: int = 0


@dataclass(slots=True)
class _Read:
    subject: SubjectRecord | None
    subject_rev: int
    versions: list[VersionRecord] = field(default_factory=list)


class SchemaStore:
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self.store = store
        self.keys = keys
        self._compiled = CompileCache()

    # ------------------------------------------------------------------ reads
    async def subject(self, subject: str) -> SubjectRecord | None:
        kv = await self.store.get(self.keys.schema_subject(validate_subject(subject)))
        return SubjectRecord.from_json(subject, kv.json()) if kv else None

    async def require_subject(self, subject: str) -> SubjectRecord:
        rec = await self.subject(subject)
        if rec is None:
            raise NotFound(
                f"schema subject {subject!r} does not exist; register a schema first "
                f"(`danube-admin schemas register {subject} --schema-type ... --file ...`)"
            )
        return rec

    async def versions(self, subject: str) -> list[VersionRecord]:
        """Every version of ``subject``, oldest first ([] for an unknown subject)."""
        kvs, _ = await self.store.get_prefix(self.keys.schema_versions_prefix(validate_subject(subject)))
        return self._versions(subject, kvs)

    def _versions(self, subject: str, kvs: Sequence[KeyValue]) -> list[VersionRecord]:
        out = []
        for kv in kvs:
            parsed = self.keys.parse_schema_key(kv.key)
            if parsed is not None and parsed[0] == subject and parsed[1] is not None:
                out.append(VersionRecord.from_json(subject, parsed[1], kv.json()))
        return sorted(out, key=lambda v: v.version)

    async def version(self, subject: str, version: int | None) -> VersionRecord:
        """Version ``version`` of ``subject`` (None: the latest)."""
        await self.require_subject(subject)
        if version is None:
            versions = await self.versions(subject)
            if not versions:
                raise NotFound(f"schema subject {subject!r} has no versions")
            return versions[-1]
        kv = await self.store.get(self.keys.schema_version(subject, version))
        if kv is None:
            raise NotFound(f"schema subject {subject!r} has no version {version}")
        return VersionRecord.from_json(subject, version, kv.json())

    async def subject_of_id(self, schema_id: int) -> str:
        value = await self.store.get_json(self.keys.schema_id(schema_id))
        if not isinstance(value, dict) or "subject" not in value:
            raise NotFound(f"no schema with id {schema_id}")
        return str(value["subject"])

    async def list_subjects(self) -> list[tuple[SubjectRecord, int]]:
        """Every subject with its latest version (0 if it has none), by name."""
        kvs, _ = await self.store.get_prefix(self.keys.schema_subjects_prefix())
        subjects: dict[str, SubjectRecord] = {}
        latest: dict[str, int] = {}
        for kv in kvs:
            parsed = self.keys.parse_schema_key(kv.key)
            if parsed is None:
                continue
            name, version = parsed
            if version is None:
                subjects[name] = SubjectRecord.from_json(name, kv.json())
            else:
                latest[name] = max(latest.get(name, 0), version)
        return [(subjects[n], latest.get(n, 0)) for n in sorted(subjects)]

    async def _read(self, subject: str) -> _Read:
        kvs, _ = await self.store.get_prefix(self.keys.schema_subject(subject))
        read = _Read(None, 0)
        own = self.keys.schema_subject(subject)
        for kv in kvs:
            if kv.key == own:
                read.subject, read.subject_rev = SubjectRecord.from_json(subject, kv.json()), kv.mod_revision
        read.versions = self._versions(subject, kvs)
        return read

    # ------------------------------------------------------------------ checks
    def _incompatible(
        self,
        subject: SubjectRecord,
        schema_type: str,
        definition: bytes,
        versions: Sequence[VersionRecord],
        mode: CompatibilityMode,
    ) -> list[str]:
        if schema_type != subject.schema_type:
            return [
                f"subject {subject.subject!r} holds {subject.schema_type} schemas, not {schema_type}: "
                "use another subject for another type"
            ]
        if mode is CompatibilityMode.NONE or not versions:
            return []
        new = self._compiled.compile(schema_type, definition)
        existing = {v.version: self._compiled.compile(v.schema_type, v.definition) for v in versions}
        return list(check_compatibility(new, existing, mode).errors)

    async def check(
        self, subject: str, schema_type: str, definition: bytes, mode: str | None = None
    ) -> list[str]:
        """Why ``definition`` could not be registered under ``subject`` now ([]: it could).
        ``mode`` overrides the subject's compatibility mode for this check only."""
        validate_subject(subject)
        schema_type = parse_schema_type(schema_type).value
        self._compiled.compile(schema_type, definition)  # an invalid definition: InvalidSchema
        read = await self._read(subject)
        if read.subject is None:
            return []
        effective = parse_compatibility_mode(mode or read.subject.compatibility_mode)
        return self._incompatible(read.subject, schema_type, definition, read.versions, effective)

    # ------------------------------------------------------------------ writes
    async def register(
        self,
        subject: str,
        schema_type: str,
        definition: bytes,
        *,
        description: str = "",
        created_by: str = "",
        tags: Sequence[str] = (),
    ) -> Registered:
        validate_subject(subject)
        schema_type = parse_schema_type(schema_type).value
        fingerprint = self._compiled.compile(schema_type, definition).fingerprint
        for _ in range(_ATTEMPTS):
            read = await self._read(subject)
            if read.subject is None:
                done = await self._create_subject(
                    subject, schema_type, definition, fingerprint, description, created_by, tags
                )
            else:
                same = next((v for v in read.versions if v.fingerprint == fingerprint), None)
                if same is not None and same.schema_type == schema_type:
                    return Registered(read.subject, same, False)
                mode = parse_compatibility_mode(read.subject.compatibility_mode)
                errors = self._incompatible(read.subject, schema_type, definition, read.versions, mode)
                if errors:
                    raise IncompatibleSchema(
                        f"the schema is not {read.subject.compatibility_mode}-compatible with subject "
                        f"{subject!r}: " + "; ".join(errors)
                    )
                done = await self._add_version(read, definition, fingerprint, description, created_by, tags)
            if done is not None:
                return done
        raise Unavailable(f"schema subject {subject!r} is being changed concurrently; retry")

    async def _create_subject(
        self,
        subject: str,
        schema_type: str,
        definition: bytes,
        fingerprint: str,
        description: str,
        created_by: str,
        tags: Sequence[str],
    ) -> Registered | None:
        counter = await self.store.get(self.keys.schema_next_id())
        schema_id = int(counter.json()["next"]) if counter else 1
        now = _now_ms()
        rec = SubjectRecord(
            subject, schema_id, schema_type, DEFAULT_COMPATIBILITY_MODE.value, 2, now, tuple(tags)
        )
        ver = VersionRecord(
            subject,
            1,
            schema_id,
            schema_type,
            definition,
            fingerprint,
            description,
            created_by,
            now,
            tuple(tags),
        )
        counter_guard = (
            Compare.mod_revision_is(self.keys.schema_next_id(), counter.mod_revision)
            if counter
            else Compare.absent(self.keys.schema_next_id())
        )
        res = await self.store.txn(
            [counter_guard, Compare.absent(self.keys.schema_subject(subject))],
            [
                Op.put(self.keys.schema_next_id(), {"next": schema_id + 1}),
                Op.put(self.keys.schema_id(schema_id), {"subject": subject}),
                Op.put(self.keys.schema_subject(subject), rec.to_json()),
                Op.put(self.keys.schema_version(subject, 1), ver.to_json()),
            ],
        )
        return Registered(rec, ver, True, res.revision) if res.succeeded else None

    async def _add_version(
        self,
        read: _Read,
        definition: bytes,
        fingerprint: str,
        description: str,
        created_by: str,
        tags: Sequence[str],
    ) -> Registered | None:
        assert read.subject is not None
        subj = read.subject
        number = subj.next_version
        ver = VersionRecord(
            subj.subject,
            number,
            subj.schema_id,
            subj.schema_type,
            definition,
            fingerprint,
            description,
            created_by,
            _now_ms(),
            tuple(tags),
        )
        updated = replace(subj, next_version=number + 1)
        res = await self.store.txn(
            [Compare.mod_revision_is(self.keys.schema_subject(subj.subject), read.subject_rev)],
            [
                Op.put(self.keys.schema_subject(subj.subject), updated.to_json()),
                Op.put(self.keys.schema_version(subj.subject, number), ver.to_json()),
            ],
        )
        return Registered(updated, ver, True, res.revision) if res.succeeded else None

    async def delete_version(self, subject: str, version: int) -> int:
        """Delete one version (never the last one left: a subject keeps at least one). Returns
        the revision of the write."""
        validate_subject(subject)
        for _ in range(_ATTEMPTS):
            read = await self._read(subject)
            if read.subject is None:
                raise NotFound(f"schema subject {subject!r} does not exist")
            if not any(v.version == version for v in read.versions):
                raise NotFound(f"schema subject {subject!r} has no version {version}")
            if len(read.versions) == 1:
                raise FailedPrecondition(
                    f"version {version} is the only version of schema subject {subject!r}; "
                    "a subject keeps at least one version"
                )
            res = await self.store.txn(
                [Compare.mod_revision_is(self.keys.schema_subject(subject), read.subject_rev)],
                [
                    Op.put(self.keys.schema_subject(subject), read.subject.to_json()),
                    Op.delete(self.keys.schema_version(subject, version)),
                ],
            )
            if res.succeeded:
                return res.revision
        raise Unavailable(f"schema subject {subject!r} is being changed concurrently; retry")

    async def set_mode(self, subject: str, mode: str) -> int:
        validate_subject(subject)
        mode = parse_compatibility_mode(mode).value
        for _ in range(_ATTEMPTS):
            kv = await self.store.get(self.keys.schema_subject(subject))
            if kv is None:
                raise NotFound(f"schema subject {subject!r} does not exist")
            rec = replace(SubjectRecord.from_json(subject, kv.json()), compatibility_mode=mode)
            res = await self.store.txn(
                [Compare.mod_revision_is(kv.key, kv.mod_revision)], [Op.put(kv.key, rec.to_json())]
            )
            if res.succeeded:
                return res.revision
        raise Unavailable(f"schema subject {subject!r} is being changed concurrently; retry")

    # ------------------------------------------------------------------ topics
    async def _topic_names(self, topic: TopicName) -> list[TopicName]:
        kv = await self.store.get(self.keys.topic(topic))
        if kv is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        partitions = int((kv.json() or {}).get("partitions", 0))
        return [topic, *(topic.partition(i) for i in range(partitions))]

    async def configure_topic(self, topic: TopicName, config: TopicSchemaConfig) -> int:
        """Give ``topic`` (and its partitions) a subject and a validation policy."""
        validate_subject(config.subject)
        validate_policy(config.validation_policy)
        await self.require_subject(config.subject)
        names = await self._topic_names(topic)
        rev = 0
        for lo in range(0, len(names), _TXN_CHUNK):
            chunk = names[lo : lo + _TXN_CHUNK]
            res = await self.store.txn(
                [Compare.exists(self.keys.topic(t)) for t in chunk],
                [Op.put(self.keys.topic_schema(t), config.to_json()) for t in chunk],
            )
            if not res.succeeded:
                raise TopicNotFound(f"topic {topic} was deleted while its schema was being configured")
            rev = res.revision
        return rev

    async def topic_config(self, topic: TopicName) -> TopicSchemaConfig | None:
        value = await self.store.get_json(self.keys.topic_schema(topic))
        return TopicSchemaConfig.from_json(value) if isinstance(value, dict) else None

    async def update_topic_policy(
        self, topic: TopicName, policy: str, enable_payload_validation: bool
    ) -> int:
        current = await self.topic_config(topic)
        if current is None:
            raise FailedPrecondition(
                f"topic {topic} has no schema: configure one first "
                f"(`danube-admin topics set-schema {topic} --subject ...`)"
            )
        updated = replace(
            current,
            validation_policy=validate_policy(policy),
            enable_payload_validation=enable_payload_validation,
            bound_by_producer=False,
        )
        return await self.configure_topic(topic, updated)

    async def bind_topic(self, topic: TopicName, subject: str) -> TopicSchemaConfig:
        """A producer with a schema reference on a topic with no schema: the topic takes that
        subject (policy ``none``), once; returns the configuration that holds after the call."""
        key = self.keys.topic_schema(topic)
        config = TopicSchemaConfig(subject, "none", False, bound_by_producer=True)
        res = await self.store.txn(
            [Compare.absent(key), Compare.exists(self.keys.topic(topic))],
            [Op.put(key, config.to_json())],
            [Op.get(key)],
        )
        if res.succeeded:
            return config
        kv = res.gets[0]
        if kv is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        return TopicSchemaConfig.from_json(kv.json())
