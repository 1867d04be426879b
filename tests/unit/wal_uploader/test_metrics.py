"""The WAL uploader's collector: totals and per-topic lag, within the series bound."""

from __future__ import annotations

import pytest

from danube_common.observability.metrics import SeriesBound
from danube_wal_uploader.metrics import (
    TopicProgress,
    Totals,
    UploaderCollector,
    format_line,
    totals_log_values,
)

pytestmark = pytest.mark.unit


def samples(collector: UploaderCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in collector.collect() for s in f.samples
    }


def test_totals_and_topics() -> None:
    totals = Totals(uploads=3, upload_errors=1, bytes_uploaded=4096, overlaps_refused=2, final_states=1)
    topics = [
        TopicProgress("/ns/a", uploaded_next_offset=10, local_next_offset=25, lag_bytes=900),
        TopicProgress("/ns/b", uploaded_next_offset=5, local_next_offset=5, lag_bytes=0),
    ]
    got = samples(UploaderCollector(lambda: (totals, True, topics), max_topics=10))
    assert got == {
        ("danube_cloud_upload_total", ()): 3,
        ("danube_cloud_upload_errors_total", ()): 1,
        ("danube_cloud_upload_bytes_total", ()): 4096,
        ("danube_wal_uploader_overlaps_refused_total", ()): 2,
        ("danube_wal_uploader_final_states_total", ()): 1,
        ("danube_wal_uploader_broker_alive", ()): 1,
        ("danube_wal_uploader_topics", ()): 2,
        ("danube_cloud_upload_lag_bytes", (("topic", "/ns/a"),)): 900,
        ("danube_cloud_upload_lag_bytes", (("topic", "/ns/b"),)): 0,
        ("danube_cloud_upload_lag_messages", (("topic", "/ns/a"),)): 15,
        ("danube_cloud_upload_lag_messages", (("topic", "/ns/b"),)): 0,
    }


def test_topics_beyond_the_bound_sum_under_other() -> None:
    topics = [
        TopicProgress(f"/ns/t{i}", uploaded_next_offset=0, local_next_offset=i, lag_bytes=100 * i)
        for i in range(1, 6)
    ]
    got = samples(UploaderCollector(lambda: (Totals(), False, topics), max_topics=2))
    lag = {labels: v for (name, labels), v in got.items() if name == "danube_cloud_upload_lag_bytes"}
    assert lag == {(("topic", "/ns/t5"),): 500, (("topic", "/ns/t4"),): 400, (("topic", "_other"),): 600}
    assert got[("danube_cloud_upload_lag_messages", (("topic", "_other"),))] == 1 + 2 + 3
    assert got[("danube_wal_uploader_broker_alive", ())] == 0


def test_bound_keeps_its_topics_between_scrapes() -> None:
    bound: SeriesBound[str] = SeriesBound(1)
    assert bound.select({"/ns/a": 10.0, "/ns/b": 5.0}) == {"/ns/a"}
    assert bound.select({"/ns/a": 1.0, "/ns/b": 50.0}) == {"/ns/a"}  # not idle: keeps its place


def test_the_status_log_uses_the_metric_names() -> None:
    totals = Totals(uploads=2, bytes_uploaded=10)
    line = format_line(
        totals_log_values(totals, broker_alive=True, topics=[TopicProgress("/ns/a", lag_bytes=7)])
    )
    assert "danube_cloud_upload_total=2" in line
    assert "danube_cloud_upload_bytes_total=10" in line
    assert "danube_wal_uploader_broker_alive=1" in line
    p = TopicProgress("/ns/a", uploaded_next_offset=3, local_next_offset=9, lag_bytes=7)
    assert 'danube_cloud_upload_lag_messages{topic="/ns/a"}=6' in format_line(p.log_values(), topic=p.topic)
