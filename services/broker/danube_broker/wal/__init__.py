"""The broker's write-ahead log: one :class:`TopicLog` per reliable topic.

Format and codec: :mod:`danube_common.wal`. Design, crash analysis and failure behaviour:
README.md next to this file.
"""

from danube_broker.wal.config import Durability, WalConfig
from danube_broker.wal.errors import DiskFull, HistoryGap, LogClosed, StorageError, StorageFailed
from danube_broker.wal.group import CommitGroup, RoundObserver
from danube_broker.wal.log import DEFAULT_READ_BYTES, TopicLog, default_executor
from danube_broker.wal.model import LogEntry, WalObserver, WalStats
from danube_broker.wal.segments import DiskOps

__all__ = [
    "DEFAULT_READ_BYTES",
    "CommitGroup",
    "DiskFull",
    "DiskOps",
    "Durability",
    "HistoryGap",
    "LogClosed",
    "LogEntry",
    "RoundObserver",
    "StorageError",
    "StorageFailed",
    "TopicLog",
    "WalConfig",
    "WalObserver",
    "WalStats",
    "default_executor",
]
