"""Metadata store: etcd (aetcd) in production, a faithful in-memory fake for unit tests."""

from danube_common.metadata.store import (
    Compare,
    KeyValue,
    MetadataStore,
    Op,
    TxnResult,
    WatchCompacted,
    WatchEvent,
)

__all__ = [
    "Compare",
    "KeyValue",
    "MetadataStore",
    "Op",
    "TxnResult",
    "WatchCompacted",
    "WatchEvent",
]
