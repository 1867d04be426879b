"""Metric names of the WAL uploader (the one place they are spelled) and the values behind them.

The values are served by ``WalUploader.Status`` and logged at INFO every
``status_log_interval_s`` while any topic has data not uploaded yet, as
``name{topic="/ns/t"}=value`` pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---- totals (since the process started)
UPLOADS_TOTAL = "danube_wal_uploader_uploads_total"
UPLOAD_ERRORS_TOTAL = "danube_wal_uploader_upload_errors_total"
BYTES_UPLOADED_TOTAL = "danube_wal_uploader_bytes_uploaded_total"
OVERLAPS_REFUSED_TOTAL = "danube_wal_uploader_overlaps_refused_total"
FINAL_STATES_TOTAL = "danube_wal_uploader_final_states_total"
BROKER_ALIVE = "danube_wal_uploader_broker_alive"
TOPICS = "danube_wal_uploader_topics"
LAG_BYTES_TOTAL = "danube_wal_uploader_lag_bytes_total"

# ---- per topic (label: topic)
TOPIC_UPLOADED_NEXT_OFFSET = "danube_wal_uploader_uploaded_next_offset"
TOPIC_LOCAL_NEXT_OFFSET = "danube_wal_uploader_local_next_offset"
TOPIC_LAG_BYTES = "danube_wal_uploader_lag_bytes"
TOPIC_LAST_UPLOAD_AT_MS = "danube_wal_uploader_last_upload_at_ms"
TOPIC_UPLOAD_ERRORS = "danube_wal_uploader_topic_upload_errors"


@dataclass(slots=True)
class Totals:
    uploads: int = 0
    upload_errors: int = 0
    bytes_uploaded: int = 0
    overlaps_refused: int = 0
    final_states: int = 0


@dataclass(slots=True)
class TopicProgress:
    topic: str
    #: The checkpoint: every offset below it is in object storage under a descriptor.
    uploaded_next_offset: int = 0
    #: The end of the local log as last seen (the open segment: its last complete frame).
    local_next_offset: int = 0
    #: Bytes on disk not uploaded yet (a partly uploaded segment counts in proportion).
    lag_bytes: int = 0
    #: The last step's error ("" once a step succeeds).
    last_error: str = ""
    last_upload_at_ms: int = 0
    upload_errors: int = 0
    #: This uploader recorded the log's end since the broker died (``final`` in Status).
    final: bool = False

    def metrics(self) -> dict[str, int]:
        return {
            TOPIC_UPLOADED_NEXT_OFFSET: self.uploaded_next_offset,
            TOPIC_LOCAL_NEXT_OFFSET: self.local_next_offset,
            TOPIC_LAG_BYTES: self.lag_bytes,
            TOPIC_LAST_UPLOAD_AT_MS: self.last_upload_at_ms,
            TOPIC_UPLOAD_ERRORS: self.upload_errors,
        }


def totals_metrics(totals: Totals, *, broker_alive: bool, topics: list[TopicProgress]) -> dict[str, int]:
    return {
        UPLOADS_TOTAL: totals.uploads,
        UPLOAD_ERRORS_TOTAL: totals.upload_errors,
        BYTES_UPLOADED_TOTAL: totals.bytes_uploaded,
        OVERLAPS_REFUSED_TOTAL: totals.overlaps_refused,
        FINAL_STATES_TOTAL: totals.final_states,
        BROKER_ALIVE: int(broker_alive),
        TOPICS: len(topics),
        LAG_BYTES_TOTAL: sum(t.lag_bytes for t in topics),
    }


def format_line(values: dict[str, int], *, topic: str | None = None) -> str:
    label = f'{{topic="{topic}"}}' if topic is not None else ""
    return " ".join(f"{name}{label}={value}" for name, value in values.items())
