"""The uploader's ``upload`` span: one per object, linked to the sampled messages it carries
(bounded), a child of the caller's span (a Flush during a move) or a trace of its own; and the
frames' contexts collected only when asked. In-memory etcd, local object store, real segments."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind

from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import LocalObjectStore
from danube_common.observability import tracing
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.topic_name import TopicName
from danube_wal_uploader.config import WalUploaderConfig
from danube_wal_uploader.disk import TopicDir
from danube_wal_uploader.spans import MAX_LINKS
from danube_wal_uploader.uploader import Uploader
from tests.support.tracing import capture_spans, children, one
from tests.unit.wal_uploader.helpers import open_log, record_stint

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

BROKER = "b1"
T = TopicName("default", "traced")
N = 200


def trace_id(i: int) -> int:
    return 0x1000 + i


def message(i: int) -> bytes:
    """Every other message sampled (flags 01); of the rest, half carry an unsampled context."""
    m = pb.StreamMessage(payload=f"m{i}".encode(), producer_name="p", sequence_id=i + 1)
    if i % 2 == 0:
        m.attributes["traceparent"] = f"00-{trace_id(i):032x}-{i + 1:016x}-01"
    elif i % 4 == 1:
        m.attributes["traceparent"] = f"00-{trace_id(i):032x}-{i + 1:016x}-00"
    return m.SerializeToString()


@pytest.fixture
async def uploader(tmp_path: Path) -> AsyncIterator[Uploader]:
    store = MemoryStore()
    keys = Keys("t")
    objects = await LocalObjectStore.open(tmp_path / "objects")
    cfg = WalUploaderConfig(broker_id=BROKER, data_dir=str(tmp_path / "data"), flush_timeout_s=5)
    lease = await store.grant_lease(60)
    await store.put(keys.broker(BROKER), {"broker_id": BROKER}, lease=lease)
    await record_stint(store, keys, T, BROKER)
    log = await open_log(tmp_path / "data" / T.namespace / T.local)
    await log.append([message(i) for i in range(N)], [1_000 + i for i in range(N)])
    await log.aclose()
    try:
        yield Uploader(cfg, store, objects, keys)
    finally:
        await objects.aclose()
        await store.aclose()


async def test_an_upload_links_to_the_sampled_messages_it_carries_at_most_64(uploader: Uploader) -> None:
    with capture_spans() as exporter:
        progress = await uploader.flush(T, N, timeout_s=5)
    assert progress.uploaded_next_offset == N
    spans = exporter.get_finished_spans()
    upload = one(spans, "upload /default/traced")
    assert upload.parent is None, "a background upload is a trace of its own"
    assert upload.attributes["danube.upload.start_offset"] == 0
    assert upload.attributes["danube.upload.next_offset"] == N
    assert upload.attributes["danube.upload.sampled_messages"] == N // 2
    assert upload.attributes["danube.upload.described"] is True
    assert len(upload.links) == MAX_LINKS == 64
    offsets = [ln.attributes["messaging.danube.offset"] for ln in upload.links]  # type: ignore[index]
    assert offsets == list(range(0, 2 * MAX_LINKS, 2)), "the sampled ones, lowest offsets first"
    assert all(ln.context.trace_id == trace_id(o) for ln, o in zip(upload.links, offsets, strict=True))
    put = one(spans, "local PutObject")
    assert children(spans, upload) == [put] and put.kind == SpanKind.CLIENT
    assert put.attributes["danube.objstore.key"] == upload.attributes["danube.upload.object_key"]


async def test_an_upload_for_a_flush_is_a_child_of_the_callers_span(uploader: Uploader) -> None:
    with (
        capture_spans() as exporter,
        tracing.tracer("test").start_as_current_span("danube.uploader.v1.WalUploader/Flush") as flush,
    ):
        await uploader.flush(T, N, timeout_s=5)
    spans = exporter.get_finished_spans()
    assert [s.name for s in children(spans, flush)] == ["upload /default/traced"]  # type: ignore[arg-type]


async def test_no_span_while_tracing_is_off(uploader: Uploader) -> None:
    with capture_spans() as exporter:
        tracing.set_enabled_for_tests(False)
        await uploader.flush(T, N, timeout_s=5)
    assert exporter.get_finished_spans() == ()


async def test_message_contexts_are_collected_only_when_asked(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    log = await open_log(directory)
    await log.append([message(i) for i in range(10)], [1] * 10)
    await log.aclose()
    d = TopicDir(directory)
    seg = d.list()[0]
    plain = d.build(seg, 0, 10)
    assert plain.traces is None
    traced = d.build(seg, 2, 10, trace_links=3)
    assert traced.traces is not None
    assert [off for off, _ in traced.traces.kept] == [2, 4, 6]
    assert traced.traces.sampled == 4  # 2, 4, 6, 8: unsampled and absent contexts are not counted
    assert traced.producer_sequences == plain.producer_sequences | {"p": 10}
