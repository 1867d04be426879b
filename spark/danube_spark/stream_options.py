"""Options of ``format("danube")`` (pure): the streaming source's and the sink's.

Spark hands options over as a case-insensitive map of strings; they are parsed once, on the
driver, into frozen values that travel to the executors with the reader or writer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from danube_common.errors import ConfigError
from danube_common.topic_name import TopicName
from danube_sdk.multi_consumer import TopicPattern
from danube_spark.stream_offsets import StartingOffsets


def _get(opts: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup (Spark's map is, a plain dict in unit tests may not be)."""
    want = name.lower()
    for k, v in opts.items():
        if k.lower() == want:
            return v
    return None


def _service_url(opts: Mapping[str, str]) -> str:
    url = _get(opts, "service_url") or _get(opts, "serviceUrl")
    if not url:
        raise ConfigError(
            "option service_url is required, e.g. .option('service_url', 'http://127.0.0.1:6650')"
        )
    return url


def _int(opts: Mapping[str, str], name: str, default: int | None, *, minimum: int = 0) -> int | None:
    raw = _get(opts, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _float(opts: Mapping[str, str], name: str, default: float) -> float:
    raw = _get(opts, name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"option {name} must be > 0, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(opts, name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name} must be true or false, got {raw!r}")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    service_url: str
    #: Topics to read (partitioned ones are expanded to their partitions); or ``pattern``.
    topics: tuple[str, ...] = ()
    #: ``/namespace/REGEX``: every matching topic of the namespace, also those created later.
    pattern: str | None = None
    starting: StartingOffsets = field(default_factory=StartingOffsets)
    #: At most this many offsets per micro-batch, over all partitions (None: everything available).
    max_messages_per_trigger: int | None = None
    #: Offsets cut by retention before the query read them fail the query (else: a warning).
    fail_on_data_loss: bool = True
    #: A task that receives nothing new for this long fails (Timeout).
    read_timeout_s: float = 60.0
    #: The driver asks the brokers for the partitions' ends at most this often.
    offsets_probe_interval_s: float = 1.0
    receiver_queue_size: int = 1000
    token: str | None = None
    #: Add the columns value (the payload decoded by its schema) and decode_error.
    decode: bool = False
    #: With decode: the subject (None: the one the listed topics are bound to).
    schema_subject: str | None = None
    #: With decode: the version the value column is typed by (None: the latest).
    schema_version: int | None = None

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> SourceOptions:
        topics_raw = _get(opts, "topics") or _get(opts, "topic")
        pattern = _get(opts, "pattern")
        if bool(topics_raw) == bool(pattern):
            raise ConfigError(
                "give exactly one of the options topics (a comma-separated list, e.g. /default/orders) "
                "and pattern (/namespace/REGEX, e.g. /default/orders-.*)"
            )
        topics: tuple[str, ...] = ()
        if topics_raw:
            topics = tuple(t.strip() for t in topics_raw.split(",") if t.strip())
            for t in topics:
                TopicName.parse(t)  # InvalidTopicName says what is allowed
        if pattern:
            TopicPattern.parse(pattern)
        probe_ms = _int(opts, "offsetsProbeIntervalMs", 1000)
        decode = _bool(opts, "decode", False)
        subject = (_get(opts, "schemaSubject") or "").strip() or None
        version = _int(opts, "schemaVersion", None, minimum=1)
        if not decode and (subject or version):
            raise ConfigError("options schemaSubject and schemaVersion need decode=true")
        if decode and pattern and not subject:
            raise ConfigError(
                "decode=true with a pattern needs schemaSubject (the topics it matches are not known in advance)"
            )
        return cls(
            service_url=_service_url(opts),
            topics=topics,
            pattern=pattern,
            starting=StartingOffsets.parse(_get(opts, "startingOffsets")),
            max_messages_per_trigger=_int(opts, "maxMessagesPerTrigger", None, minimum=1),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            read_timeout_s=_float(opts, "readTimeoutSeconds", 60.0),
            offsets_probe_interval_s=(probe_ms or 0) / 1000.0,
            receiver_queue_size=_int(opts, "receiverQueueSize", 1000, minimum=1) or 1000,
            token=_get(opts, "token"),
            decode=decode,
            schema_subject=subject,
            schema_version=version,
        )


@dataclass(frozen=True, slots=True)
class SinkOptions:
    service_url: str
    topic: str
    #: Prefix of the producer names (one producer per Spark partition and query or job).
    producer_name: str | None = None
    reliable: bool = True
    batching_max_messages: int = 1000
    #: Sort each task's rows by content before numbering them (held in memory): for plans whose
    #: row order within a partition can differ between attempts (aggregations, joins).
    sort_rows_for_replay: bool = False
    token: str | None = None

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> SinkOptions:
        topic = _get(opts, "topic")
        if not topic:
            raise ConfigError("option topic is required: the topic rows are written to, e.g. /default/counts")
        TopicName.parse(topic)
        name = _get(opts, "producerName")
        if name is not None and (not name or any(c.isspace() for c in name)):
            raise ConfigError(f"option producerName must be a non-empty name without spaces, got {name!r}")
        return cls(
            service_url=_service_url(opts),
            topic=topic,
            producer_name=name,
            reliable=_bool(opts, "reliable", True),
            batching_max_messages=_int(opts, "batchingMaxMessages", 1000, minimum=1) or 1000,
            sort_rows_for_replay=_bool(opts, "sortRowsForReplay", False),
            token=_get(opts, "token"),
        )
