"""The WAL uploader's figures and its Prometheus collector (names:
``danube_common.observability.metric_names``).

The figures (:class:`Totals`, one :class:`TopicProgress` per topic) are kept by the upload
steps as they go; they are served by ``WalUploader.Status``, read by :class:`UploaderCollector`
when ``/metrics`` is scraped (per-topic series within ``metrics.max_topics``, the rest summed
under ``topic="_other"``), and logged at INFO every ``status_log_interval_s`` while any topic
has data not uploaded yet, as ``name{topic="/ns/t"}=value`` pairs under the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from danube_common.observability import metric_names as mn
from danube_common.observability.metrics import OTHER_TOPICS, MetricDef, SeriesBound, add_samples

#: Per-topic gauges, in the order of :meth:`TopicProgress.gauges`.
TOPIC_GAUGES: tuple[MetricDef, ...] = (mn.UPLOAD_LAG_BYTES, mn.UPLOAD_LAG_OFFSETS)
TOTALS: tuple[MetricDef, ...] = (
    mn.UPLOADS,
    mn.UPLOAD_ERRORS,
    mn.UPLOAD_BYTES,
    mn.UPLOADER_OVERLAPS_REFUSED,
    mn.UPLOADER_FINAL_STATES,
)


@dataclass(slots=True)
class Totals:
    uploads: int = 0
    upload_errors: int = 0
    bytes_uploaded: int = 0
    overlaps_refused: int = 0
    final_states: int = 0

    def values(self) -> tuple[int, ...]:
        """In the order of :data:`TOTALS`."""
        return (
            self.uploads,
            self.upload_errors,
            self.bytes_uploaded,
            self.overlaps_refused,
            self.final_states,
        )


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

    @property
    def lag_offsets(self) -> int:
        return max(0, self.local_next_offset - self.uploaded_next_offset)

    def gauges(self) -> tuple[int, ...]:
        """In the order of :data:`TOPIC_GAUGES`."""
        return (self.lag_bytes, self.lag_offsets)

    def log_values(self) -> dict[str, int]:
        return {
            **{d.exposed: v for d, v in zip(TOPIC_GAUGES, self.gauges(), strict=True)},
            "uploaded_next_offset": self.uploaded_next_offset,
            "local_next_offset": self.local_next_offset,
            "upload_errors": self.upload_errors,
        }


def totals_log_values(totals: Totals, *, broker_alive: bool, topics: list[TopicProgress]) -> dict[str, int]:
    return {
        **{d.exposed: v for d, v in zip(TOTALS, totals.values(), strict=True)},
        mn.UPLOADER_BROKER_ALIVE.exposed: int(broker_alive),
        mn.UPLOADER_TOPICS.exposed: len(topics),
        "lag_bytes": sum(t.lag_bytes for t in topics),
    }


def format_line(values: dict[str, int], *, topic: str | None = None) -> str:
    label = f'{{topic="{topic}"}}' if topic is not None else ""
    return " ".join(f"{name}{label}={value}" for name, value in values.items())


def uploader_families(
    totals: Totals, *, broker_alive: bool, topics: Sequence[TopicProgress], bound: SeriesBound[str]
) -> list[Metric]:
    """Every family of the uploader; per-topic series for the topics ``bound`` keeps (by lag)."""
    out = [add_samples(d.family(), {(): v}) for d, v in zip(TOTALS, totals.values(), strict=True)]
    out.append(add_samples(mn.UPLOADER_BROKER_ALIVE.family(), {(): int(broker_alive)}))
    out.append(add_samples(mn.UPLOADER_TOPICS.family(), {(): len(topics)}))
    by_topic = {p.topic: p for p in topics}
    kept = bound.select({name: p.lag_bytes for name, p in by_topic.items()})
    gauges = [d.family() for d in TOPIC_GAUGES]
    other = [0] * len(TOPIC_GAUGES)
    for name in sorted(by_topic):
        values = by_topic[name].gauges()
        if name in kept:
            for fam, v in zip(gauges, values, strict=True):
                fam.add_metric([name], v)  # type: ignore[attr-defined]
        else:
            other = [a + b for a, b in zip(other, values, strict=True)]
    if len(kept) < len(by_topic):
        for fam, v in zip(gauges, other, strict=True):
            fam.add_metric([OTHER_TOPICS], v)  # type: ignore[attr-defined]
    return [*out, *gauges]


class UploaderCollector:
    """Reads the uploader's figures at each scrape. ``read`` returns (totals, broker alive,
    every topic's progress)."""

    def __init__(
        self, read: Callable[[], tuple[Totals, bool, Sequence[TopicProgress]]], *, max_topics: int
    ) -> None:
        self._read = read
        self._bound: SeriesBound[str] = SeriesBound(max_topics)

    def describe(self) -> list[Metric]:
        defs = (*TOTALS, mn.UPLOADER_BROKER_ALIVE, mn.UPLOADER_TOPICS, *TOPIC_GAUGES)
        return [d.family() for d in defs]

    def collect(self) -> Iterator[Metric]:
        totals, alive, topics = self._read()
        yield from uploader_families(totals, broker_alive=alive, topics=topics, bound=self._bound)
