"""The options of ``spark.read.format("danube-history")``, parsed and checked (pure).

Spark hands a data source its options as strings with case-insensitive names. They map onto the
project's own config models, so the names are those of the services' YAML, dotted::

    topic                       /ns/topic (a partitioned topic: all its partitions)
    object_store.backend        local | s3 (ObjectStoreConfig; any of its fields, e.g.
    object_store.local_dir      object_store.s3.bucket, object_store.s3.endpoint_url,
    object_store.prefix         object_store.s3.access_key_id, ...)
    etcd.endpoints              host:port[,host:port]: list descriptors in etcd (EtcdConfig:
    etcd.cluster                any of its fields); unset: list the object store instead
    start_offset, end_offset    offsets [start, end) of each partition
    start_time, end_time        publish times [start, end): epoch milliseconds or ISO-8601
    max_objects_per_partition   objects one Spark task reads at most (default 8)
    max_partition_bytes         bytes of objects one task reads at most (default 64 MiB)
    decompress                  true (default) | false: lz4/zstd payloads as stored
    incarnation                 listing only: the topic incarnation to read (default: newest)
    decode                      false (default) | true: add the columns value (the payload
                                decoded by its schema) and decode_error (see danube_spark.decoding)
    schema_registry_url         with decode: where the driver asks the schema registry (the
                                service URL or the admin URL of the lookup service)
    schema_subject              with decode: the subject (default: the one the topic is bound to)
    schema_version              with decode: the version the value column is typed by (default:
                                the latest)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from danube_common.config import EtcdConfig
from danube_common.errors import ConfigError
from danube_common.objstore import ObjectStoreConfig
from danube_common.topic_name import TopicName

MIB = 1024 * 1024
_SCALARS = {
    "topic",
    "start_offset",
    "end_offset",
    "start_time",
    "end_time",
    "max_objects_per_partition",
    "max_partition_bytes",
    "decompress",
    "incarnation",
    "decode",
    "schema_registry_url",
    "schema_subject",
    "schema_version",
}
_HELP = (
    "options: topic, object_store.* (backend, local_dir, prefix, s3.bucket, s3.endpoint_url, ...), "
    "etcd.* (endpoints, cluster, ...), start_offset, end_offset, start_time, end_time, "
    "max_objects_per_partition, max_partition_bytes, decompress, incarnation, decode, schema_registry_url, "
    "schema_subject, schema_version"
)


@dataclass(frozen=True, slots=True)
class HistoryOptions:
    topic: TopicName
    object_store: ObjectStoreConfig
    #: None: find objects by listing the object store.
    etcd: EtcdConfig | None
    start_offset: int = 0
    end_offset: int | None = None
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    max_objects_per_partition: int = 8
    max_partition_bytes: int = 64 * MIB
    decompress: bool = True
    incarnation: int | None = None
    decode: bool = False
    schema_registry_url: str | None = None
    schema_subject: str | None = None
    schema_version: int | None = None

    def keeps_time(self, publish_time_ms: int) -> bool:
        if self.start_time_ms is not None and publish_time_ms < self.start_time_ms:
            return False
        return self.end_time_ms is None or publish_time_ms < self.end_time_ms


def parse_options(options: Mapping[str, str]) -> HistoryOptions:
    """HistoryOptions from Spark's options; ConfigError saying what is wrong and what is allowed."""
    opts = {k.lower(): v for k, v in options.items()}
    path = opts.pop("path", None)  # .load("/ns/topic")
    if path and not opts.get("topic"):
        opts["topic"] = path
    store: dict[str, Any] = {}
    etcd: dict[str, Any] = {}
    for name, value in opts.items():
        if name.startswith("object_store."):
            _nest(store, name.removeprefix("object_store.").split("."), value)
        elif name.startswith("etcd."):
            sub = name.removeprefix("etcd.")
            _nest(etcd, sub.split("."), _split(value) if sub == "endpoints" else value)
        elif name not in _SCALARS:
            raise ConfigError(f"danube-history: unknown option {name!r}; {_HELP}")
    if not opts.get("topic"):
        raise ConfigError(f"danube-history: option 'topic' is required (e.g. /default/orders); {_HELP}")
    topic = TopicName.parse(opts["topic"].strip())
    try:
        store_cfg = ObjectStoreConfig.model_validate(store)
        etcd_cfg = EtcdConfig.model_validate(etcd) if etcd else None
    except ValidationError as exc:
        raise ConfigError(
            f"danube-history: bad object_store.* or etcd.* option: {_first_error(exc)}"
        ) from None
    if etcd_cfg is not None and "endpoints" not in etcd:
        raise ConfigError("danube-history: etcd.* options need etcd.endpoints (host:port[,host:port])")
    out = HistoryOptions(
        topic=topic,
        object_store=store_cfg,
        etcd=etcd_cfg,
        start_offset=_int(opts, "start_offset", 0, low=0) or 0,
        end_offset=_int(opts, "end_offset", None, low=0),
        start_time_ms=_time(opts, "start_time"),
        end_time_ms=_time(opts, "end_time"),
        max_objects_per_partition=_int(opts, "max_objects_per_partition", 8, low=1) or 8,
        max_partition_bytes=_int(opts, "max_partition_bytes", 64 * MIB, low=1) or 64 * MIB,
        decompress=_bool(opts, "decompress", True),
        incarnation=_int(opts, "incarnation", None, low=1),
        decode=_bool(opts, "decode", False),
        schema_registry_url=(opts.get("schema_registry_url") or "").strip() or None,
        schema_subject=(opts.get("schema_subject") or "").strip() or None,
        schema_version=_int(opts, "schema_version", None, low=1),
    )
    if out.end_offset is not None and out.end_offset < out.start_offset:
        raise ConfigError(
            f"danube-history: end_offset {out.end_offset} is below start_offset {out.start_offset} "
            "(the range is [start_offset, end_offset))"
        )
    if out.decode and out.schema_registry_url is None:
        raise ConfigError(
            "danube-history: decode=true needs schema_registry_url (the service URL or the lookup's admin "
            "URL: the driver asks it for the schema; executors do not)"
        )
    if not out.decode and (out.schema_subject or out.schema_version or out.schema_registry_url):
        raise ConfigError(
            "danube-history: schema_registry_url, schema_subject and schema_version need decode=true"
        )
    if out.incarnation is not None and out.etcd is not None:
        raise ConfigError("danube-history: incarnation applies to listing only (without etcd.*)")
    return out


def _nest(into: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        into = into.setdefault(part, {})
        if not isinstance(into, dict):
            raise ConfigError(f"danube-history: option {'.'.join(path)!r} conflicts with another option")
    into[path[-1]] = value


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(p) for p in e.get("loc", ()))
    return f"{where}: {e.get('msg', '')}" if where else str(e.get("msg", ""))


def _int(opts: Mapping[str, str], name: str, default: int | None, *, low: int) -> int | None:
    raw = opts.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"danube-history: option {name} must be an integer, got {raw!r}") from None
    if value < low:
        raise ConfigError(f"danube-history: option {name} must be at least {low}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"danube-history: option {name} must be true or false, got {raw!r}")


def parse_time_ms(raw: str, *, name: str = "time") -> int:
    """Epoch milliseconds from digits, or from ISO-8601 (no zone: UTC)."""
    text = raw.strip()
    if text.isdigit():
        return int(text)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"danube-history: option {name} must be epoch milliseconds or an ISO-8601 time "
            f"(2026-01-31T12:00:00Z), got {raw!r}"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def _time(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name)
    return None if raw is None or raw.strip() == "" else parse_time_ms(raw, name=name)
