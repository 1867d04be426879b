"""The broker's side of the schema registry: producers' schema references and publish checks.

A topic's schema configuration (``danube_common.schema_store.TopicSchemaConfig``, read from the
watch-fed :class:`~danube_common.schema_view.SchemaView`) names a subject and a validation policy:

- ``none``: nothing is checked;
- ``warn``: what ``enforce`` would refuse is accepted, logged (at most once a minute per topic)
  and counted;
- ``enforce``: a producer must reference the topic's subject, and a batch is refused whole
  (INVALID_ARGUMENT, code ``INVALID_PAYLOAD``) if one of its messages carries another subject's
  schema id, or, with ``enable_payload_validation``, names an unknown version or does not decode
  as the version it names. Nothing of a refused batch is stored.

Producers (:meth:`SchemaGate.bind_producer`): a ``schema_ref`` is resolved to a version (latest,
pinned, or the latest if at least ``min_version``). A topic with no schema takes the producer's
subject (policy ``none``): the first producer binds it, as in Danube. Messages that carry no
schema id are stamped with the producer's resolved version, so consumers always learn the
version of what they read (``StreamMessage.schema_id``/``schema_version``).

Payload validation is batched: one compiled validator per version (compiled once and cached),
run over the batch's payloads in one pass on the publish path. A compressed payload
(``StreamMessage.compression``) is decompressed for the check only (what is stored stays as
the producer sent it), and every message of a pack (``StreamMessage.batch_size``) is checked; a chunk of a large message cannot be validated and is refused (a
problem under ``warn``), since no broker ever holds the whole message.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from danube_common.compression import decompress
from danube_common.errors import DanubeError, FailedPrecondition, IncompatibleSchema, InvalidPayload, NotFound
from danube_common.grpc_util import MAX_GRPC_MESSAGE_BYTES
from danube_common.packing import unpack
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.schema import CompileCache, validate_batch
from danube_common.schema_store import (
    SchemaStore,
    SubjectRecord,
    TopicSchemaConfig,
    VersionRecord,
    validate_subject,
)
from danube_common.schema_view import SchemaView
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: Seconds between two "warn" log lines of one topic.
_WARN_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class ProducerSchema:
    """The schema version a producer's reference resolved to (stamped on its messages)."""

    subject: str
    schema_id: int
    version: int


class SchemaGate:
    def __init__(self, view: SchemaView, store: SchemaStore) -> None:
        self._view = view
        self._store = store
        self._compiled = CompileCache()
        #: topic -> messages that ``warn`` let through although ``enforce`` would refuse them.
        self.warnings: dict[str, int] = defaultdict(int)
        #: topic -> batches refused under ``enforce``.
        self.refusals: dict[str, int] = defaultdict(int)
        self._warned_at: dict[str, float] = {}

    # ------------------------------------------------------------------ producers
    async def _subject(self, subject: str) -> SubjectRecord:
        rec = self._view.subjects.get(subject) or await self._store.subject(subject)
        if rec is None:
            raise NotFound(
                f"schema subject {subject!r} does not exist; register it first "
                f"(`danube-admin schemas register {subject} ...`)"
            )
        return rec

    async def _version(self, subject: str, version: int | None) -> VersionRecord:
        found = self._view.latest(subject) if version is None else self._view.version(subject, version)
        return found or await self._store.version(subject, version)

    async def bind_producer(self, topic: str, ref: pb.SchemaReference | None) -> ProducerSchema | None:
        """Resolve a producer's schema reference against ``topic``'s configuration."""
        config = self._view.topic(topic)
        if ref is None:
            if config is not None and config.validation_policy == "enforce":
                raise IncompatibleSchema(
                    f"topic {topic} requires schema subject {config.subject!r} (validation enforce): "
                    f"create the producer with schema subject {config.subject!r}"
                )
            return None
        subject = validate_subject(ref.subject)
        rec = await self._subject(subject)
        which = ref.WhichOneof("version_ref")
        if which == "pinned_version":
            resolved = await self._version(subject, ref.pinned_version)
        else:
            resolved = await self._version(subject, None)
            if which == "min_version" and resolved.version < ref.min_version:
                raise FailedPrecondition(
                    f"schema subject {subject!r} is at version {resolved.version}; the producer asks for "
                    f"at least version {ref.min_version}"
                )
        if config is None:
            config = await self._store.bind_topic(TopicName.parse(topic), subject)
            if config.bound_by_producer and config.subject == subject:
                log.info("topic %s bound to schema subject %s by its first producer", topic, subject)
        if config.subject != subject:
            why = f"topic {topic} uses schema subject {config.subject!r}; the producer references {subject!r}"
            if config.validation_policy == "enforce":
                raise IncompatibleSchema(
                    why + f": create the producer with schema subject {config.subject!r}"
                )
            if config.validation_policy == "warn":
                self._warn(topic, why)
        return ProducerSchema(subject, rec.schema_id, resolved.version)

    # ------------------------------------------------------------------ publishing
    def check_batch(self, topic: str, producer: ProducerSchema | None, msgs: list[pb.StreamMessage]) -> None:
        """Stamp the producer's version on messages that carry none; then apply the topic's
        policy (raises InvalidPayload under ``enforce``). Runs before anything is stored."""
        if producer is not None:
            for m in msgs:
                if not m.HasField("schema_id"):
                    m.schema_id = producer.schema_id
                    m.schema_version = producer.version
        config = self._view.topic(topic)
        if config is None or config.validation_policy == "none":
            return
        problem = self._first_problem(config, msgs)
        if problem is None:
            return
        if config.validation_policy == "enforce":
            self.refusals[topic] += 1
            raise InvalidPayload(problem + "; nothing of the batch was stored")
        self.warnings[topic] += 1
        self._warn(topic, problem)

    def _first_problem(self, config: TopicSchemaConfig, msgs: list[pb.StreamMessage]) -> str | None:
        subject = self._view.subjects.get(config.subject)
        if subject is None:
            return f"the topic's schema subject {config.subject!r} no longer exists"
        where = "the message" if len(msgs) == 1 else "message {} of the batch"
        groups: dict[int, list[int]] = defaultdict(list)
        for i, m in enumerate(msgs):
            if m.HasField("schema_id") and m.schema_id != subject.schema_id:
                return (
                    f"{where.format(i)} carries schema id {m.schema_id}; the topic's subject "
                    f"{subject.subject!r} has id {subject.schema_id}"
                )
            groups[m.schema_version if m.HasField("schema_version") else 0].append(i)
        if not config.enable_payload_validation:
            return None
        for version, indexes in groups.items():
            rec = (
                self._view.version(subject.subject, version)
                if version
                else self._view.latest(subject.subject)
            )
            if rec is None:
                return f"{where.format(indexes[0])} names version {version} of schema subject {subject.subject!r}, which does not exist"
            compiled = self._compiled.compile(rec.schema_type, rec.definition)
            payloads: list[bytes] = []
            owners: list[int] = []  # payload -> the message it is (in a pack: part of)
            for i in indexes:
                plain, problem = _plain_payloads(msgs[i], where.format(i), subject.subject)
                if problem is not None:
                    return problem
                payloads.extend(plain)
                owners.extend([i] * len(plain))
            errors = validate_batch(compiled, payloads, first_only=True)
            if errors:
                i = owners[errors[0].index]
                return (
                    f"{where.format(i)} does not match schema subject {subject.subject!r} version "
                    f"{rec.version} ({rec.schema_type}): {errors[0].reason}"
                )
        return None

    def _warn(self, topic: str, problem: str) -> None:
        now = time.monotonic()
        if now - self._warned_at.get(topic, -_WARN_EVERY_S) >= _WARN_EVERY_S:
            self._warned_at[topic] = now
            log.warning(
                "topic %s (validation warn): %s; accepted (%d so far)", topic, problem, self.warnings[topic]
            )


def _plain_payloads(m: pb.StreamMessage, where: str, subject: str) -> tuple[list[bytes], str | None]:
    """The payloads to validate (decompressed if needed; each message of a pack), or why they
    cannot be validated."""
    if m.batch_size:
        try:
            return [e.payload for e in unpack(m, max_bytes=MAX_GRPC_MESSAGE_BYTES)], None
        except DanubeError as exc:
            return [], f"{where} cannot be validated against schema subject {subject!r}: {exc.message}"
    if m.HasField("chunk"):
        return [], (
            f"{where} is chunk {m.chunk.index + 1} of {m.chunk.count} of a message larger than the "
            f"broker's max_message_size_bytes; payloads of schema subject {subject!r} are validated and "
            "a chunk cannot be: send messages within the limit, or turn payload validation off"
        )
    if not m.compression:
        return [m.payload], None
    try:
        return [decompress(m.compression, m.payload, max_bytes=MAX_GRPC_MESSAGE_BYTES)], None
    except DanubeError as exc:
        return [], f"{where} cannot be validated against schema subject {subject!r}: {exc.message}"
