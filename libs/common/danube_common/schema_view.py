"""A local copy of the schema registry (subjects, versions, ids, topic schemas), fed by one watch.

The lookup service answers registry reads from it and the brokers validate publishes with it.
Like every watch-fed cache it lists once, then follows the watch from that listing's revision, so
it never misses a change. A writer that must read its own write waits for the write's revision
(:meth:`CompileCache.wait_revision`).
"""

from __future__ import annotations

from danube_common.keys import Keys
from danube_common.metadata.follow import WatchedCache
from danube_common.metadata.store import KeyValue, MetadataStore, WatchEvent
from danube_common.schema_store import SubjectRecord, TopicSchemaConfig, VersionRecord


class SchemaView(WatchedCache):
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        super().__init__(store, keys.schemas_prefix(), what="schema view")
        self._keys = keys
        self.subjects: dict[str, SubjectRecord] = {}
        #: subject -> version -> record.
        self.versions: dict[str, dict[int, VersionRecord]] = {}
        self.topics: dict[str, TopicSchemaConfig] = {}

    def _reset(self) -> None:
        self.subjects, self.versions, self.topics = {}, {}, {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        parsed = self._keys.parse_schema_key(key)
        if parsed is not None:
            subject, version = parsed
            if version is None:
                self.subjects[subject] = SubjectRecord.from_json(subject, item.json())
            else:
                self.versions.setdefault(subject, {})[version] = VersionRecord.from_json(
                    subject, version, item.json()
                )
            return
        topic = self._keys.parse_topic_schema(key)
        if topic is not None:
            self.topics[str(topic)] = TopicSchemaConfig.from_json(item.json())

    def _delete(self, key: str) -> None:
        parsed = self._keys.parse_schema_key(key)
        if parsed is not None:
            subject, version = parsed
            if version is None:
                self.subjects.pop(subject, None)
                self.versions.pop(subject, None)
            else:
                self.versions.get(subject, {}).pop(version, None)
            return
        topic = self._keys.parse_topic_schema(key)
        if topic is not None:
            self.topics.pop(str(topic), None)

    # ------------------------------------------------------------------ reads
    def subject_by_id(self, schema_id: int) -> SubjectRecord | None:
        return next((s for s in self.subjects.values() if s.schema_id == schema_id), None)

    def latest(self, subject: str) -> VersionRecord | None:
        versions = self.versions.get(subject)
        return versions[max(versions)] if versions else None

    def version(self, subject: str, version: int) -> VersionRecord | None:
        return self.versions.get(subject, {}).get(version)

    def all_versions(self, subject: str) -> list[VersionRecord]:
        return [v for _, v in sorted(self.versions.get(subject, {}).items())]

    def topic(self, topic: str) -> TopicSchemaConfig | None:
        return self.topics.get(topic)
